// The frames of publishes: an event's fields as the API takes them, and the batched
// publish (`publish_batch`) whose head is built here and whose events' CBOR follows it,
// each encoded once (the client cuts runs of publishes into such frames).
import { arrayHeader, cbor, frameBytes, normalizeInt } from './frames.js';

export function publishFields(topic, options) {
  const event = { topic, attrs: options.attrs ?? {} };
  if (options.payload !== undefined) event.payload = toBytes(options.payload);
  if (options.msgId !== undefined) event.msg_id = options.msgId;
  if (options.ttl !== undefined && options.ttl !== null) event.ttl = options.ttl;
  return event;
}

function toBytes(payload) {
  if (payload instanceof Uint8Array) return payload;
  if (typeof payload === 'string') return Buffer.from(payload, 'utf8');
  throw new TypeError('payload must be a Uint8Array, Buffer or string');
}

export function published(result) {
  return { msgId: result.msg_id, seq: result.seq === null || result.seq === undefined
    ? null : normalizeInt(result.seq) };
}

// A batched publish is the map {op: "publish_batch", rid, reliable, events: [...]}: its
// head is built here and the events' own CBOR follows, each encoded once.
const PREFIX = {
  op: Buffer.from(cbor.encode('op')), name: Buffer.from(cbor.encode('publish_batch')),
  rid: Buffer.from(cbor.encode('rid')), reliable: Buffer.from(cbor.encode('reliable')),
  events: Buffer.from(cbor.encode('events')),
};
// The map's head (4 entries), the keys, the op's name and the boolean: all but the rid.
const PREFIX_FIXED = 1 + PREFIX.op.length + PREFIX.name.length + PREFIX.rid.length
  + PREFIX.reliable.length + 1 + PREFIX.events.length;

function batchPrefix(rid, reliable, count) {
  return Buffer.concat([Buffer.from([0xa4]), PREFIX.op, PREFIX.name, PREFIX.rid,
    cbor.encode(rid), PREFIX.reliable, Buffer.from([reliable ? 0xf5 : 0xf4]), PREFIX.events,
    arrayHeader(count)]);
}

export function batchPrefixSize(rid, count) {
  const ridSize = rid < 24 ? 1 : rid < 0x100 ? 2 : rid < 0x10000 ? 3 : rid < 2 ** 32 ? 5 : 9;
  return PREFIX_FIXED + ridSize + arrayHeader(count).length;
}

/** The frame of a batched publish of `bodies` (each event's CBOR, encoded once). */
export function batchFrame(rid, reliable, bodies) {
  return frameBytes(Buffer.concat([batchPrefix(rid, reliable, bodies.length), ...bodies]));
}
