// Durable consumers (docs/API.md, "Durable consumers"): the subscribe fields, the
// subscription whose events can be acknowledged, and the requests that settle them.
import { BadRequest } from './errors.js';
import { arrayHeader, cbor, normalizeInt } from './frames.js';
import { Subscription, eventFields } from './subscription.js';

/** A durable subscription's settings: the option's name and the API's field. */
export const SETTINGS = [
  ['ack', 'ack'], ['ackWait', 'ack_wait'], ['maxDeliver', 'max_deliver'],
  ['deadLetter', 'dead_letter'], ['maxInflight', 'max_inflight'], ['pull', 'pull'],
];

/**
 * Add `durable` and the settings given (undefined or null: the daemon's default) to a
 * subscribe request's fields; returns the BadRequest the daemon would answer when they
 * do not go together (settings without `durable`; `durable` with `expiry`, `replay` or
 * `group`), else null.
 * @param {Record<string, unknown>} fields the subscribe request so far
 * @param {import('./index.js').DurableSubscribeOptions} options
 */
export function addDurableFields(fields, options) {
  const given = SETTINGS.filter(([option]) => options[option] !== undefined
    && options[option] !== null);
  for (const [option, field] of given) fields[field] = options[option];
  if (options.durable === undefined || options.durable === null) {
    return given.length === 0 ? null : new BadRequest('bad_request', `'${given[0][1]}' is `
      + "for a durable subscription: give 'durable' too");
  }
  fields.durable = options.durable;
  const other = ['expiry', 'replay', 'group'].find((field) => fields[field] !== undefined
    && fields[field] !== null);
  return other === undefined ? null : new BadRequest('bad_request', `'${other}' is not for `
    + 'a durable subscription (its consumer keeps its place; unsubscribe detaches it)');
}

/** The msg_ids named by a msg_id, an event, or an iterable of either. */
function msgIdsOf(named) {
  const one = (item) => {
    if (typeof item === 'string') return item;
    if (item !== null && typeof item === 'object' && typeof item.msgId === 'string') {
      return item.msgId;
    }
    throw new TypeError('name events by msg_id (text) or by the events themselves');
  };
  if (named !== null && typeof named === 'object' && Symbol.iterator in named) {
    return Array.from(named, one);
  }
  return [one(named)];
}

/**
 * A subscription attached to a durable consumer. Its events are {@link DurableEvent}s;
 * with `pull` none are pushed: ask with {@link DurableSubscription#fetch}.
 */
export class DurableSubscription extends Subscription {
  constructor(client, topic, options) {
    super(client, topic, options);
    /** The consumer's name. */
    this.durable = options.durable;
  }

  /**
   * Acknowledge events (with `ack`): done, never delivered again.
   * @param {string | {msgId: string} | Iterable<string | {msgId: string}>} msgIds
   */
  ack(msgIds) {
    return this._settle('ack', msgIds, {});
  }

  /** Deliver events again, not before `delay` seconds (default 0). */
  nak(msgIds, delay) {
    return this._settle('nak', msgIds, delay === undefined || delay === null ? {} : { delay });
  }

  /** End events: never delivered again (not acknowledged: traced as `term`). */
  term(msgIds) {
    return this._settle('term', msgIds, {});
  }

  /**
   * Up to `max` events (default 1) of a `pull` subscription, waiting up to `wait` seconds
   * (default 0: answer at once, maybe with none) for the first. Replies come in request
   * order: while it waits, the replies to later requests of the connection wait too.
   * @param {{max?: number, wait?: number}} [options]
   * @returns {Promise<DurableEvent[]>}
   */
  async fetch({ max, wait } = {}) {
    const fields = { op: 'fetch', sub: this.id };
    if (max !== undefined && max !== null) fields.max = max;
    if (wait !== undefined && wait !== null) fields.wait = wait;
    const reply = await this.client.request(fields);
    return (reply.events ?? []).map((item) => this._event(eventFields(item)));
  }

  _event(fields) {
    return new DurableEvent(this, fields);
  }

  /** One request for one msg_id; for several, `msg_ids` in as few requests as fit the
   * daemon's max_frame, sent together. An empty list asks nothing. */
  async _settle(op, named, extra) {
    const msgIds = msgIdsOf(named);
    if (msgIds.length === 0) return;
    const client = this.client;
    const head = { op, sub: this.id, ...extra };
    if (msgIds.length === 1) {
      await client.request({ ...head, msg_id: msgIds[0] });
      return;
    }
    const sizes = msgIds.map((msgId) => cbor.encode(msgId).length);
    const requests = [];
    let start = 0;
    while (start < msgIds.length) {
      // The request's bytes but its msg_ids, with the rid it will get: exact.
      const fixed = cbor.encode({ ...head, msg_ids: [], rid: client._nextRid }).length - 1;
      let end = start;
      let bytes = fixed;
      while (end < msgIds.length && (end === start
          || bytes + sizes[end] + arrayHeader(end + 1 - start).length <= client.maxFrame)) {
        bytes += sizes[end];
        end += 1;
      }
      requests.push(client.request({ ...head, msg_ids: msgIds.slice(start, end) }));
      start = end;
    }
    await Promise.all(requests);
  }
}

/**
 * An event of a durable subscription: the fields of any event (`attempt`: deliveries of
 * it to the consumer so far, this one included) and the requests that settle it.
 */
export class DurableEvent {
  #subscription;

  constructor(subscription, fields) {
    Object.assign(this, fields);
    this.#subscription = subscription;
  }

  /** Done with it: never delivered again. */
  ack() {
    return this.#subscription.ack(this.msgId);
  }

  /** Deliver it again, not before `delay` seconds (default 0). */
  nak(delay) {
    return this.#subscription.nak(this.msgId, delay);
  }

  /** Never deliver it again. */
  term() {
    return this.#subscription.term(this.msgId);
  }
}

/** A consumer as the `consumers` reply reports it, its fields named as in JavaScript
 * (`ack_wait` -> `ackWait`, ...). */
export function consumerInfo(report) {
  const info = {};
  for (const [name, value] of Object.entries(report)) {
    info[name.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase())] = normalizeInt(value);
  }
  return info;
}
