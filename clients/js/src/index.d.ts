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
  /** Seconds after its publish time within which the event may be delivered, fetched or
   * replayed (structured mode; (0, 315360000]). Default: as long as retention keeps it. */
  ttl?: number;
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
  /** Deliveries of this event to the subscription's durable consumer so far, this one
   * included (1 for any other subscription). */
  attempt: number;
}

/** Options of a subscription attached to a durable consumer. The first subscribe naming
 * the consumer creates it with its filter and settings; later ones must give the same
 * (else {@link Conflict}). Settings left out (or null) are the daemon's defaults. */
export interface DurableSubscribeOptions
  extends Omit<SubscribeOptions, 'expiry' | 'replay' | 'group' | 'onEvent'> {
  /** The consumer's name (1 to 256 characters), per topic. */
  durable: string;
  /** The application acknowledges each event (ack, nak, term); default false: an event
   * is done once delivered. */
  ack?: boolean;
  /** Seconds in (0, 86400] before an unacknowledged event is delivered again (30). */
  ackWait?: number;
  /** Deliveries of one event at most, in [1, 1000] (5); then it is dead-lettered. */
  maxDeliver?: number;
  /** Topic dead-lettered events are published to (default none: dropped). */
  deadLetter?: string;
  /** Unacknowledged events outstanding per attached subscription, in [1, 65536] (256). */
  maxInflight?: number;
  /** No pushes: ask for events with {@link DurableSubscription.fetch} (default false). */
  pull?: boolean;
  /** Called for each pushed event instead of queueing it for iteration. */
  onEvent?: (event: DurableEvent) => void;
}

/** Events to settle: msg_ids, or the events themselves. */
export type MsgIds = string | { msgId: string } | Iterable<string | { msgId: string }>;

/** An event of a durable subscription: it can be acknowledged. */
export interface DurableEvent extends OverlayEvent {}
export class DurableEvent {
  private constructor();
  /** Done with it: never delivered again. */
  ack(): Promise<void>;
  /** Deliver it again, not before `delay` seconds (in [0, 86400], default 0). */
  nak(delay?: number): Promise<void>;
  /** Never deliver it again (not acknowledged: traced as `term`). */
  term(): Promise<void>;
}

/** A durable consumer as its topic's root reports it (`consumers`). */
export interface ConsumerInfo {
  durable: string;
  filter: string;
  ack: boolean;
  ackWait: number;
  maxDeliver: number;
  deadLetter: string | null;
  maxInflight: number;
  pull: boolean;
  /** Events waiting to be delivered (also those waiting for a nak's delay). */
  pending: number;
  inflight: number;
  /** Attached subscriptions. */
  members: number;
  redelivered: number;
  deadLettered: number;
  /** Every seq up to it is done. */
  ackFloor: number | bigint;
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
  /** With `durable`: attach to that durable consumer of the topic. Settings without
   * `durable`, or `durable` with `expiry`, `replay` or `group`, reject with BadRequest
   * before anything is sent (the daemon refuses them alike). */
  subscribe(topic: string, options: DurableSubscribeOptions): Promise<DurableSubscription>;
  subscribe(topic: string, options?: SubscribeOptions): Promise<Subscription>;
  /** A topic's durable consumers (only `durable`, when given); `more`: some left out of
   * the reply (ask for them by name). */
  consumers(topic: string, durable?: string): Promise<{ consumers: ConsumerInfo[]; more: boolean }>;
  /** End a durable consumer (its subscriptions get `ended`); whether there was one. */
  deleteConsumer(topic: string, durable: string): Promise<boolean>;
  status(): Promise<Record<string, unknown>>;
  /** Any request map; `rid` is added. Resolves with the reply map. */
  request(fields: Record<string, unknown>): Promise<Record<string, unknown>>;
  close(): void;
}

export class Subscription<E extends OverlayEvent = OverlayEvent> implements AsyncIterable<E> {
  readonly client: Client;
  readonly topic: string;
  readonly id: number;
  readonly expired: boolean;
  /** Null, or why the overlay ended the subscription (an `ended` push; code `deleted`:
   * its durable consumer was deleted). Iteration ends when it is set. */
  readonly ended: RequestError | null;
  renew(expiry: number): Promise<void>;
  unsubscribe(): Promise<void>;
  /** The next event, or null once the subscription ended. */
  next(): Promise<E | null>;
  [Symbol.asyncIterator](): AsyncIterator<E>;
}

/** A subscription attached to a durable consumer. */
export class DurableSubscription extends Subscription<DurableEvent> {
  /** The consumer's name. */
  readonly durable: string;
  /** Acknowledge events (split into as few requests as fit max_frame; none: no request). */
  ack(msgIds: MsgIds): Promise<void>;
  /** Deliver events again, not before `delay` seconds (in [0, 86400], default 0). */
  nak(msgIds: MsgIds, delay?: number): Promise<void>;
  /** Never deliver events again. */
  term(msgIds: MsgIds): Promise<void>;
  /** Up to `max` events (in [1, 10000], default 1) of a `pull` subscription, waiting up
   * to `wait` seconds (in [0, 3600], default 0: at once, maybe none) for the first.
   * Replies come in request order: while it waits, later requests' replies wait too. */
  fetch(options?: { max?: number; wait?: number }): Promise<DurableEvent[]>;
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
/** `conflict`: a durable subscribe named a consumer that exists with another filter or
 * other settings. */
export class Conflict extends RequestError {}
export class Internal extends RequestError {}
