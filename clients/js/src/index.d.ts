// Types of @overlay/client (the daemon's local socket API, version 1).

/** Attribute values: text, number, boolean; integers beyond 2^53 as BigInt (CBOR integers). */
export type AttrValue = string | number | bigint | boolean;
export type Attrs = Record<string, AttrValue>;

export interface ConnectOptions {
  /** Sent in hello as `client`. Default "overlay-js". */
  clientName?: string;
  /** Ask the daemon for batched notify pushes (default true; harmless on a daemon without). */
  batchNotify?: boolean;
  /** Send publishes asked in a row as one batched publish when offered (default true). */
  batchPublish?: boolean;
}

export interface PublishOptions {
  attrs?: Attrs;
  /** Bytes; a string is sent as its UTF-8 bytes. */
  payload?: Uint8Array | string;
  /** Default true: the reply waits until the topic's root and its replicas hold the event. */
  reliable?: boolean;
  /** Lowercase hex chosen by the caller: a retried publish with it is idempotent. */
  msgId?: string;
}

export interface Published {
  msgId: string;
  seq: number | bigint | null;
}

export interface SubscribeOptions {
  /** Filter expression; "" (default) = every event. */
  filter?: string;
  /** Seconds until the subscription expires; default: until unsubscribed or disconnected. */
  expiry?: number;
  /** Events still retained by the topic's root: the last N, or those from seq S on. */
  replay?: { last: number } | { sinceSeq: number };
  /** Subscriptions with the same group on a topic share its events. */
  group?: string;
  /** Called for each event instead of queueing it for iteration. */
  onEvent?: (event: OverlayEvent) => void;
  /** Events queued for iteration before the connection stops reading (default 10000). */
  highWaterMark?: number;
}

export interface OverlayEvent {
  sub: number;
  topic: string;
  msgId: string;
  seq: number | bigint | null;
  attrs: Attrs;
  payload: Uint8Array;
  /** Hex node id of the publisher's daemon. */
  publisher: string;
  /** Publish time, seconds since the epoch. */
  ts: number;
}

export const API_VERSION: 1;
export function defaultTarget(): string;
export function connect(
  target?: string | { path: string } | { host: string; port: number },
  options?: ConnectOptions,
): Promise<Client>;

export class Client {
  readonly node: string;
  readonly mode: 'structured' | 'unstructured' | string;
  readonly version: number;
  readonly features: string[];
  /** Largest request or push body (hello's `max_frame`). */
  readonly maxFrame: number;
  /** Largest event size: payload, topic and attributes (hello's `max_event`). */
  readonly maxEvent: number;
  /** Largest payload (hello's `max_payload`). */
  readonly maxPayload: number;
  /** Most events one batched publish may carry (hello's `max_batch`; 0 when not offered). */
  readonly maxBatch: number;
  /** Resolves with the ConnectionClosed error once the connection is gone. */
  readonly closed: Promise<ConnectionClosed>;
  publish(topic: string, options?: PublishOptions): Promise<Published>;
  publishMany(events: Array<{ topic: string } & Omit<PublishOptions, 'reliable'>>,
    options?: { reliable?: boolean }): Promise<Array<Published | RequestError>>;
  subscribe(topic: string, options?: SubscribeOptions): Promise<Subscription>;
  status(): Promise<Record<string, unknown>>;
  /** Any request map; `rid` is added. Resolves with the reply map. */
  request(fields: Record<string, unknown>): Promise<Record<string, unknown>>;
  close(): void;
}

export class Subscription implements AsyncIterable<OverlayEvent> {
  readonly client: Client;
  readonly topic: string;
  readonly id: number;
  readonly expired: boolean;
  renew(expiry: number): Promise<void>;
  unsubscribe(): Promise<void>;
  /** The next event, or null once the subscription ended. */
  next(): Promise<OverlayEvent | null>;
  [Symbol.asyncIterator](): AsyncIterator<OverlayEvent>;
}

export class OverlayError extends Error {}
export class ConnectionClosed extends OverlayError {
  cause?: RequestError;
}
export class RequestError extends OverlayError {
  readonly code: string;
  readonly detail: string;
  readonly extra: Record<string, unknown>;
  static fromWire(error: unknown): RequestError;
}
export class BadFrame extends RequestError {}
export class BadRequest extends RequestError {}
export class BadFilter extends RequestError {
  readonly pos: number | undefined;
}
export class UnknownSub extends RequestError {}
export class UnsupportedVersion extends RequestError {}
export class NotReady extends RequestError {}
export class Overloaded extends RequestError {}
export class TooLarge extends RequestError {}
export class Timeout extends RequestError {}
export class StorageError extends RequestError {}
export class Internal extends RequestError {}
