// One subscription: the events the daemon pushes for it, handed out in order.
import { normalizeInt } from './frames.js';

const EMPTY = Buffer.alloc(0);

/** An event's fields from a notify push (or a notify-shaped map of a fetch reply). */
export function eventFields(msg) {
  const attrs = msg.attrs ?? {};
  for (const key in attrs) {
    if (typeof attrs[key] === 'bigint') attrs[key] = normalizeInt(attrs[key]);
  }
  return {
    sub: normalizeInt(msg.sub),
    topic: msg.topic,
    msgId: msg.msg_id,
    seq: msg.seq === null || msg.seq === undefined ? null : normalizeInt(msg.seq),
    attrs,
    payload: msg.payload ?? EMPTY,
    publisher: msg.publisher,
    ts: msg.ts,
    attempt: msg.attempt === null || msg.attempt === undefined ? 1 : normalizeInt(msg.attempt),
  };
}

/**
 * One subscription: an async iterable of events, or a callback (`onEvent`).
 * Iteration ends when the subscription expires, is unsubscribed, or is ended by the
 * overlay (`ended`); it throws {@link ConnectionClosed} when the connection is lost.
 */
export class Subscription {
  constructor(client, topic, options) {
    this.client = client;
    this.topic = topic;
    /** The daemon's handle (`sub`), set once the subscription is in effect. */
    this.id = -1;
    /** True once the daemon said the subscription's expiry passed. */
    this.expired = false;
    /** Null, or why the overlay ended the subscription (an `ended` push: a RequestError,
     * code `deleted` when its durable consumer was deleted). */
    this.ended = null;
    this._onEvent = options.onEvent;
    this._highWater = options.highWaterMark ?? 10_000;
    this._queue = [];
    this._head = 0;
    this._waiter = null;
    this._done = false;
    this._error = null;
  }

  /** Extend the subscription: `expiry` seconds from now. */
  async renew(expiry) {
    await this.client.request({ op: 'renew', sub: this.id, expiry });
  }

  /** End the subscription; iteration ends. */
  async unsubscribe() {
    await this.client.request({ op: 'unsubscribe', sub: this.id });
    this.client._subs.delete(this.id);
    this._end(null, false);
  }

  /** The next event, or null once the subscription ended. */
  async next() {
    const result = await this[Symbol.asyncIterator]().next();
    return result.done ? null : result.value;
  }

  [Symbol.asyncIterator]() {
    return {
      next: () => {
        if (this._head < this._queue.length) {
          const value = this._queue[this._head++];
          if (this._head === this._queue.length) {
            this._queue = [];
            this._head = 0;
            this.client._backpressure(this, false);
          }
          return Promise.resolve({ value, done: false });
        }
        if (this._error) return Promise.reject(this._error);
        if (this._done) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve, reject) => { this._waiter = { resolve, reject }; });
      },
      return: async () => {
        if (!this._done && this.client._subs.has(this.id)) {
          await this.unsubscribe().catch(() => {});
        }
        return { value: undefined, done: true };
      },
      [Symbol.asyncIterator]() { return this; },
    };
  }

  /** The event handed out for a notify's fields (a durable subscription's can be settled). */
  _event(fields) {
    return fields;
  }

  _deliver(event) {
    if (this._onEvent) {
      this._onEvent(event);
      return;
    }
    if (this._waiter) {
      const waiter = this._waiter;
      this._waiter = null;
      waiter.resolve({ value: event, done: false });
      return;
    }
    this._queue.push(event);
    if (this._queue.length - this._head === this._highWater) this.client._backpressure(this, true);
  }

  /** The overlay ended the subscription: iteration ends, `ended` tells why. */
  _endedBy(error) {
    if (this._done) return;
    this.ended = error;
    this.client._subs.delete(this.id);
    this._end(null, false);
  }

  _end(error, expired) {
    if (this._done) return;
    this._done = true;
    this.expired = expired;
    if (expired) this.client._subs.delete(this.id);
    this.client._backpressure(this, false);
    this._error = error;  // thrown once the events already queued are taken
    const waiter = this._waiter;
    this._waiter = null;
    if (waiter) {
      if (this._error) waiter.reject(this._error);
      else waiter.resolve({ value: undefined, done: true });
    }
  }
}
