// The overlay daemon's local socket API (version 1), from JavaScript.
//
// One Client is one connection. Requests may be pipelined: every method returns a
// promise, and the frames of everything asked in one turn of the event loop leave in
// one write. Publishes asked in a row are sent as one batched publish when the daemon
// offers it (hello's `features`), split so that no frame exceeds the daemon's
// `max_frame`: a publisher that keeps many publishes in flight gets batching for free.
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

import {
  ConnectionClosed,
  RequestError,
} from './errors.js';
import {
  DEFAULT_MAX_FRAME,
  FrameReader,
  cbor,
  encodeFrame,
  normalizeInt,
} from './frames.js';
import { SizeLimits } from './limits.js';
import { batchFrame, batchPrefixSize, publishFields, published } from './publish_frames.js';
import { DurableSubscription, addDurableFields, consumerInfo } from './durable.js';
import { Subscription, eventFields } from './subscription.js';

export const API_VERSION = 1;

/** Where to connect when no target is given: $OVERLAY_API, else the default state dir. */
export function defaultTarget() {
  if (process.env.OVERLAY_API) return process.env.OVERLAY_API;
  const base = process.env.XDG_STATE_HOME || path.join(os.homedir(), '.local', 'state');
  return path.join(base, 'overlay', 'api.sock');
}

/**
 * Connect to a daemon and say hello.
 * @param {string | {path: string} | {host: string, port: number}} [target]
 *   a Unix socket path, `tcp:HOST:PORT`, or an object; default {@link defaultTarget}
 * @param {import('./index.js').ConnectOptions} [options]
 * @returns {Promise<Client>}
 */
export async function connect(target, options = {}) {
  const socket = await openSocket(target ?? defaultTarget());
  const client = new Client(socket, options);
  try {
    await client._hello();
  } catch (error) {
    client.close();
    throw error;
  }
  return client;
}

function openSocket(target) {
  let address = target;
  if (typeof target === 'string') {
    if (target.startsWith('tcp:')) {
      const rest = target.slice(4);
      const colon = rest.lastIndexOf(':');
      address = { host: rest.slice(0, colon).replace(/^\[|\]$/g, ''),
        port: Number(rest.slice(colon + 1)) };
    } else {
      address = { path: target };
    }
  }
  return new Promise((resolve, reject) => {
    const socket = net.createConnection(address);
    const failed = (error) => {
      reject(new ConnectionClosed(`cannot reach the daemon at ${describe(target)}: ${error.message}`));
    };
    socket.once('error', failed);
    socket.once('connect', () => {
      socket.off('error', failed);
      socket.setNoDelay?.(true);
      resolve(socket);
    });
  });
}

function describe(target) {
  return typeof target === 'string' ? target : JSON.stringify(target);
}

export class Client {
  /** @param {net.Socket} socket @param {import('./index.js').ConnectOptions} options */
  constructor(socket, options) {
    this.socket = socket;
    this.clientName = options.clientName ?? 'overlay-js';
    this.batchNotify = options.batchNotify ?? true;
    this.batchPublish = options.batchPublish ?? true;
    /** From the hello reply. */
    this.node = '';
    this.mode = '';
    this.version = 0;
    /** @type {string[]} */
    this.features = [];
    /** The daemon's size limits (maxFrame, maxEvent, maxPayload below). */
    this.limits = new SizeLimits({});
    /** Most events one batched publish may carry (hello's `max_batch`; 0: none offered). */
    this.maxBatch = 0;

    this._nextRid = 1;
    /** rid -> {resolve, reject, kind ('request', 'publish' or 'publish_batch'), subscription?
     * or items?} */
    this._pending = new Map();
    /** sub handle -> Subscription */
    this._subs = new Map();
    /** Requests of this turn not yet written: frames, and publishes still to batch. */
    this._outgoing = [];
    this._flushQueued = false;
    this._closedError = null;
    this._reader = new FrameReader(DEFAULT_MAX_FRAME);
    this._pausedBy = new Set();

    this.closed = new Promise((resolve) => { this._resolveClosed = resolve; });
    socket.on('data', (chunk) => this._onData(chunk));
    socket.on('error', (error) => this._lost(new ConnectionClosed(
      `connection to the daemon lost: ${error.message}`)));
    socket.on('close', () => this._lost(new ConnectionClosed('the daemon closed the connection')));
  }

  /** Largest frame body the daemon reads (hello's `max_frame`). */
  get maxFrame() { return this.limits.maxFrame; }

  /** Largest event size, payload included (hello's `max_event`). */
  get maxEvent() { return this.limits.maxEvent; }

  /** Largest payload (hello's `max_payload`). */
  get maxPayload() { return this.limits.maxPayload; }

  // -- requests ------------------------------------------------------------------

  async _hello() {
    const reply = await this.request({
      op: 'hello', version: API_VERSION, client: this.clientName,
      ...(this.batchNotify ? { batch_notify: true } : {}),
    });
    this.node = reply.node;
    this.mode = reply.mode;
    this.version = reply.version;
    this.features = Array.isArray(reply.features) ? reply.features : [];
    if (this.features.includes('publish_batch') && typeof reply.max_batch === 'number') {
      this.maxBatch = reply.max_batch;
    }
    this.limits = new SizeLimits(reply);
    this._reader.maxFrame = Math.max(this._reader.maxFrame, this.limits.maxFrame);
    return reply;
  }

  /**
   * Send any request map (`rid` is added) and resolve with the reply map;
   * rejects with a typed {@link RequestError} when the reply is `ok: false`.
   * @param {Record<string, unknown>} fields
   */
  request(fields) {
    return this._request(fields, null);
  }

  _request(fields, subscription) {
    return new Promise((resolve, reject) => {
      if (this._closedError) {
        reject(this._closedError);
        return;
      }
      const rid = this._nextRid++;
      const frame = encodeFrame({ ...fields, rid });
      const refused = this.limits.frameRefusal(frame.length - 4);
      if (refused) {
        reject(refused);
        return;
      }
      // Any map, a publish too, is answered with its reply map: kind 'request'.
      this._pending.set(rid, { resolve, reject, kind: 'request', subscription });
      this._queue({ frame, reject });
    });
  }

  /**
   * Publish one event. Resolves with `{msgId, seq}` once the daemon accepted it (with
   * `reliable`, once the topic's root and its replicas hold it).
   * @param {string} topic
   * @param {import('./index.js').PublishOptions} [options]
   * @returns {Promise<import('./index.js').Published>}
   */
  publish(topic, options = {}) {
    return new Promise((resolve, reject) => {
      if (this._closedError) {
        reject(this._closedError);
        return;
      }
      const event = publishFields(topic, options);
      const refused = this.limits.refusal(event);
      if (refused) {
        reject(refused);
        return;
      }
      const reliable = options.reliable ?? true;
      this._queue({ event, reliable, resolve, reject });
    });
  }

  /**
   * Publish several events in one request (when the daemon offers batched publish; else
   * one request each). Resolves with one entry per event, in order: `{msgId, seq}` or
   * the {@link RequestError} refusing that event; the others are not affected.
   * @param {Array<{topic: string} & import('./index.js').PublishOptions>} events
   * @param {{reliable?: boolean}} [options]
   */
  publishMany(events, options = {}) {
    const reliable = options.reliable ?? true;
    return Promise.all(events.map((event) => this.publish(event.topic,
      { ...event, reliable }).catch((error) => {
      if (error instanceof RequestError) return error;
      throw error;
    })));
  }

  /**
   * Subscribe to a topic. Resolves once the subscription is in effect. With `durable`,
   * attach to that durable consumer of the topic (created by the first subscribe naming
   * it, with this one's filter and settings): a {@link DurableSubscription}.
   * @param {string} topic
   * @param {import('./index.js').SubscribeOptions
   *   | import('./index.js').DurableSubscribeOptions} [options]
   * @returns {Promise<Subscription>}
   */
  async subscribe(topic, options = {}) {
    const fields = { op: 'subscribe', topic, filter: options.filter ?? '' };
    if (options.expiry !== undefined && options.expiry !== null) fields.expiry = options.expiry;
    if (options.group !== undefined) fields.group = options.group;
    if (options.replay !== undefined) {
      const { last, sinceSeq } = options.replay;
      fields.replay = last !== undefined ? { last } : { since_seq: sinceSeq };
    }
    const refused = addDurableFields(fields, options);
    if (refused) throw refused;
    const subscription = fields.durable === undefined
      ? new Subscription(this, topic, options) : new DurableSubscription(this, topic, options);
    await this._request(fields, subscription);
    return subscription;
  }

  /**
   * A topic's durable consumers as its root reports them (only `durable`, when given):
   * `more` is true when the reply left some out (ask for them by name).
   * @param {string} topic
   * @param {string} [durable]
   * @returns {Promise<{consumers: import('./index.js').ConsumerInfo[], more: boolean}>}
   */
  async consumers(topic, durable) {
    const fields = { op: 'consumers', topic };
    if (durable !== undefined && durable !== null) fields.durable = durable;
    const reply = await this.request(fields);
    return { consumers: (reply.consumers ?? []).map(consumerInfo), more: reply.more === true };
  }

  /**
   * End a topic's durable consumer: every subscription attached to it ends (its
   * `ended` says why), and its state is gone. Resolves with whether there was one.
   * @param {string} topic
   * @param {string} durable
   * @returns {Promise<boolean>}
   */
  async deleteConsumer(topic, durable) {
    const reply = await this.request({ op: 'delete_consumer', topic, durable });
    return reply.deleted === true;
  }

  /** The daemon's status map. */
  async status() {
    const { rid, ok, ...status } = await this.request({ op: 'status' });
    return status;
  }

  /** Close the connection; pending requests reject with ConnectionClosed. */
  close() {
    this._flush();
    this._lost(new ConnectionClosed('the client closed the connection'));
    this.socket.end();
    this.socket.destroySoon?.();
  }

  // -- writing -------------------------------------------------------------------

  _queue(item) {
    this._outgoing.push(item);
    if (!this._flushQueued) {
      this._flushQueued = true;
      queueMicrotask(() => this._flush());
    }
  }

  _flush() {
    this._flushQueued = false;
    const items = this._outgoing;
    if (items.length === 0) return;
    this._outgoing = [];
    const frames = [];
    const batching = this.batchPublish && this.maxBatch > 1;
    let run = [];
    const endRun = () => {
      if (run.length > 0) this._publishFrames(run, batching, frames);
      run = [];
    };
    for (const item of items) {
      if (item.frame) {
        endRun();
        frames.push(item.frame);
      } else {
        if (run.length > 0 && run[0].reliable !== item.reliable) endRun();
        run.push(item);
      }
    }
    endRun();
    if (frames.length > 0 && !this._closedError) {
      this.socket.write(frames.length === 1 ? frames[0] : Buffer.concat(frames));
    }
  }

  /** Frames for publishes of one reliability in a row: batches bounded by max_frame bytes
   * and max_batch events. */
  _publishFrames(run, batching, frames) {
    if (!batching || run.length === 1) {
      for (const item of run) {
        const rid = this._nextRid++;
        const frame = encodeFrame({ op: 'publish', rid, reliable: item.reliable, ...item.event });
        const refused = this.limits.frameRefusal(frame.length - 4);
        if (refused) {
          item.reject(refused);
          continue;
        }
        this._pending.set(rid, { resolve: item.resolve, reject: item.reject, kind: 'publish' });
        frames.push(frame);
      }
      return;
    }
    let batch = [];
    let bodies = [];
    let size = 0;
    let rid = this._nextRid;
    const send = () => {
      if (batch.length > 0) {
        frames.push(this._batchFrame(rid, run[0].reliable, batch, bodies));
        this._nextRid++;
        rid = this._nextRid;
      }
      batch = [];
      bodies = [];
      size = 0;
    };
    for (const item of run) {
      const body = Buffer.from(cbor.encode(item.event));  // cbor-x reuses its buffer
      const refused = this.limits.frameRefusal(batchPrefixSize(rid, 1) + body.length);
      if (refused) {
        item.reject(refused);
        continue;
      }
      if (batch.length === this.maxBatch
          || batchPrefixSize(rid, batch.length + 1) + size + body.length > this.maxFrame) send();
      batch.push(item);
      bodies.push(body);
      size += body.length;
    }
    send();
  }

  _batchFrame(rid, reliable, batch, bodies) {
    this._pending.set(rid, { kind: 'publish_batch', items: batch });
    return batchFrame(rid, reliable, bodies);
  }

  // -- reading -------------------------------------------------------------------

  _onData(chunk) {
    const messages = [];
    let unreadable = null;
    try {
      this._reader.push(chunk, (body) => messages.push(cbor.decode(body)));
    } catch (error) {
      unreadable = error;
    }
    for (const msg of messages) this._dispatch(msg);
    if (unreadable) {
      this._lost(new ConnectionClosed(`unreadable data from the daemon: ${unreadable.message}`));
      this.socket.destroy();
    }
  }

  _dispatch(msg) {
    const event = msg.event;
    if (event === undefined) {
      this._reply(msg);
    } else if (event === 'notify_batch') {
      for (const notify of msg.events) this._notify(notify);
    } else if (event === 'notify') {
      this._notify(msg);
    } else if (event === 'expired') {
      const sub = this._subs.get(normalizeInt(msg.sub));
      if (sub) sub._end(null, true);
    } else if (event === 'ended') {
      const sub = this._subs.get(normalizeInt(msg.sub));
      if (sub) sub._endedBy(RequestError.fromWire(msg.error));
    } else if (event === 'error') {
      const error = RequestError.fromWire(msg.error);
      this._lost(new ConnectionClosed(`the daemon closed the connection: ${error.message}`,
        error));
    }
  }

  _notify(msg) {
    const sub = this._subs.get(msg.sub);
    if (sub === undefined) return;
    sub._deliver(sub._event(eventFields(msg)));
  }

  _reply(msg) {
    const rid = normalizeInt(msg.rid);
    const entry = this._pending.get(rid);
    if (entry === undefined) return;
    this._pending.delete(rid);
    if (entry.kind === 'publish_batch') {
      this._batchReply(entry.items, msg);
      return;
    }
    if (!msg.ok) {
      entry.reject(RequestError.fromWire(msg.error));
      return;
    }
    if (entry.kind === 'publish') {
      entry.resolve(published(msg));
    } else if (entry.subscription) {
      // Register now: the subscription's first events follow this reply at once.
      const subscription = entry.subscription;
      subscription.id = normalizeInt(msg.sub);
      this._subs.set(subscription.id, subscription);
      entry.resolve(msg);
    } else {
      entry.resolve(msg);
    }
  }

  _batchReply(items, msg) {
    if (!msg.ok) {
      const error = RequestError.fromWire(msg.error);
      for (const item of items) item.reject(error);
      return;
    }
    const results = msg.results ?? [];
    items.forEach((item, i) => {
      const result = results[i];
      if (result === undefined) {
        item.reject(RequestError.fromWire({ code: 'internal',
          message: `the batch reply has ${results.length} results for ${items.length} events` }));
      } else if (result.error !== undefined) {
        item.reject(RequestError.fromWire(result.error));
      } else {
        item.resolve(published(result));
      }
    });
  }

  _lost(error) {
    if (this._closedError) return;
    this._closedError = error;
    for (const entry of this._pending.values()) {
      if (entry.items) for (const item of entry.items) item.reject(error);
      else entry.reject(error);
    }
    this._pending.clear();
    for (const item of this._outgoing) item.reject?.(error);
    this._outgoing = [];
    for (const sub of this._subs.values()) sub._end(error, false);
    this._subs.clear();
    this._resolveClosed(error);
  }

  /** A subscription's consumer is behind (or caught up): stop (or resume) reading. */
  _backpressure(subscription, behind) {
    if (behind) this._pausedBy.add(subscription);
    else this._pausedBy.delete(subscription);
    if (this._pausedBy.size > 0) this.socket.pause();
    else this.socket.resume();
  }
}
