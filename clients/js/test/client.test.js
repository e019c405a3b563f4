// The client against a real daemon: every request and push of the API, and its edges.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import {
  BadFilter,
  BadRequest,
  ConnectionClosed,
  TooLarge,
  UnknownSub,
  UnsupportedVersion,
  connect,
} from '../src/index.js';
import { FrameReader, cbor, encodeFrame } from '../src/frames.js';
import { nextWithin, startDaemon, waitFor } from './daemon.js';

const MAX_INT64 = 2n ** 63n - 1n;
const MIN_INT64 = -(2n ** 63n);

describe('one daemon', () => {
  let daemon;
  let client;
  let topicCount = 0;
  const freshTopic = () => `topic-${process.pid}-${++topicCount}`;

  before(async () => {
    daemon = await startDaemon();
    client = await connect(daemon.api, { clientName: 'js-tests' });
  });
  after(async () => {
    client?.close();
    await daemon?.stop();
  });

  test('hello tells the node, version and mode', () => {
    assert.match(client.node, /^[0-9a-f]+$/);
    assert.equal(client.node, daemon.node);
    assert.equal(client.version, 1);
    assert.equal(client.mode, 'structured');
  });

  test('a published event reaches a subscriber with its attrs and payload', async () => {
    const topic = freshTopic();
    const sub = await client.subscribe(topic);
    assert.ok(Number.isInteger(sub.id) && sub.id >= 0);
    const payload = Buffer.from([0, 1, 2, 255]);
    const attrs = { sym: 'ACME', price: 101.5, qty: 7, live: true, neg: -3 };
    const published = await client.publish(topic, { attrs, payload });
    assert.match(published.msgId, /^[0-9a-f]+$/);
    const event = await nextWithin(sub);
    assert.equal(event.topic, topic);
    assert.equal(event.sub, sub.id);
    assert.equal(event.msgId, published.msgId);
    assert.equal(event.seq, published.seq);
    assert.deepEqual(event.attrs, attrs);
    assert.deepEqual(Buffer.from(event.payload), payload);
    assert.equal(event.publisher, client.node);
    assert.ok(Math.abs(event.ts - Date.now() / 1000) < 60, `ts ${event.ts}`);
    await sub.unsubscribe();
  });

  test('64-bit integer edges go as CBOR integers and come back exact', async () => {
    // On the wire: major type 0/1 with an 8-byte argument, never a float.
    assert.equal(cbor.encode(MAX_INT64)[0], 0x1b);
    assert.equal(cbor.encode(MIN_INT64)[0], 0x3b);
    const topic = freshTopic();
    const sub = await client.subscribe(topic, { filter: `big = ${MAX_INT64}` });
    await client.publish(topic, { attrs: { big: MAX_INT64 - 1n, small: MIN_INT64 } });
    await client.publish(topic, { attrs: { big: MAX_INT64, small: MIN_INT64, safe: 2 ** 40 } });
    // The filter compares exactly: 2^63-2 does not match 2^63-1 (a float would).
    const event = await nextWithin(sub);
    assert.equal(event.attrs.big, MAX_INT64);
    assert.equal(event.attrs.small, MIN_INT64);
    assert.equal(event.attrs.safe, 2 ** 40, 'integers JS holds exactly come back as numbers');
    assert.equal(typeof event.attrs.safe, 'number');
    await sub.unsubscribe();
  });

  test('unicode topics, attribute names, values and filters', async () => {
    const topic = `préis/東京/${freshTopic()}/🚀`;
    const sub = await client.subscribe(topic, { filter: "city = 'Zürich ☃'" });
    await client.publish(topic, { attrs: { city: 'Genève' } });
    await client.publish(topic, { attrs: { city: 'Zürich ☃', '名前': '😀' }, payload: 'ünï' });
    const event = await nextWithin(sub);
    assert.equal(event.topic, topic);
    assert.deepEqual(event.attrs, { city: 'Zürich ☃', '名前': '😀' });
    assert.equal(Buffer.from(event.payload).toString('utf8'), 'ünï');
    await sub.unsubscribe();
  });

  test('a large payload near max_frame goes through; one past it is refused locally', async () => {
    const topic = freshTopic();
    const sub = await client.subscribe(topic);
    const big = Buffer.alloc(900_000);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7) & 0xff;
    await client.publish(topic, { payload: big });
    const event = await nextWithin(sub);
    assert.equal(event.payload.length, big.length);
    assert.ok(Buffer.from(event.payload).equals(big));
    await assert.rejects(client.publish(topic, { payload: Buffer.alloc(client.maxFrame) }),
      (error) => error instanceof TooLarge && error.code === 'too_large');
    // The connection is still good.
    await client.publish(topic, { payload: 'after' });
    assert.equal(Buffer.from((await nextWithin(sub)).payload).toString(), 'after');
    await sub.unsubscribe();
  });

  test('a filter selects events; a bad filter is a BadFilter with its position', async () => {
    const topic = freshTopic();
    const sub = await client.subscribe(topic, { filter: 'price > 100' });
    for (const price of [50, 150, 99.5, 100.5]) await client.publish(topic, { attrs: { price } });
    assert.equal((await nextWithin(sub)).attrs.price, 150);
    assert.equal((await nextWithin(sub)).attrs.price, 100.5);
    await sub.unsubscribe();
    await assert.rejects(client.subscribe(topic, { filter: 'price > ' }),
      (error) => error instanceof BadFilter && error.code === 'bad_filter'
        && Number.isInteger(error.pos));
  });

  test('expiry ends the subscription with an expired push; renew extends it', async () => {
    const topic = freshTopic();
    const short = await client.subscribe(topic, { expiry: 0.3 });
    const renewed = await client.subscribe(topic, { expiry: 0.3 });
    await renewed.renew(60);
    const started = Date.now();
    assert.equal(await nextWithin(short, 10_000), null, 'iteration ends at expiry');
    assert.ok(short.expired);
    assert.ok(Date.now() - started < 10_000);
    await client.publish(topic, { attrs: { n: 1 } });
    assert.equal((await nextWithin(renewed)).attrs.n, 1, 'the renewed one still receives');
    assert.equal(renewed.expired, false);
    await assert.rejects(short.renew(10), UnknownSub);
    await renewed.unsubscribe();
  });

  test('unsubscribe ends iteration; a handle not ours is unknown_sub', async () => {
    const sub = await client.subscribe(freshTopic());
    await sub.unsubscribe();
    assert.equal(await nextWithin(sub), null);
    await assert.rejects(client.request({ op: 'unsubscribe', sub: sub.id }),
      (error) => error instanceof UnknownSub && error.code === 'unknown_sub');
  });

  test('replay gives the last N retained events with their seq', async () => {
    const topic = freshTopic();
    const seqs = [];
    for (let n = 0; n < 5; n++) seqs.push((await client.publish(topic, { attrs: { n } })).seq);
    assert.ok(seqs.every((seq) => Number.isInteger(seq)));
    const sub = await client.subscribe(topic, { replay: { last: 3 } });
    const got = [];
    for (let i = 0; i < 3; i++) got.push(await nextWithin(sub));
    assert.deepEqual(got.map((e) => e.attrs.n), [2, 3, 4]);
    assert.deepEqual(got.map((e) => e.seq), seqs.slice(2));
    const since = await client.subscribe(topic, { replay: { sinceSeq: seqs[3] } });
    assert.equal((await nextWithin(since)).attrs.n, 3);
    assert.equal((await nextWithin(since)).attrs.n, 4);
    await sub.unsubscribe();
    await since.unsubscribe();
  });

  test('a group shares the events: each goes to exactly one member', async () => {
    const topic = freshTopic();
    const seen = new Map();
    const members = [];
    for (let i = 0; i < 2; i++) {
      members.push(await client.subscribe(topic, {
        group: 'workers', onEvent: (event) => seen.set(event.attrs.n, (seen.get(event.attrs.n) ?? 0) + 1),
      }));
    }
    for (let n = 0; n < 40; n++) await client.publish(topic, { attrs: { n } });
    await waitFor(() => seen.size === 40, '40 events to the group');
    assert.ok([...seen.values()].every((count) => count === 1), 'no event twice');
    for (const member of members) await member.unsubscribe();
  });

  test('a retried publish with the same msg_id is delivered once', async () => {
    const topic = freshTopic();
    const sub = await client.subscribe(topic);
    const msgId = 'abc123def4567890';
    const first = await client.publish(topic, { attrs: { n: 1 }, msgId });
    const second = await client.publish(topic, { attrs: { n: 1 }, msgId });
    assert.equal(first.msgId, msgId);
    assert.equal(second.msgId, msgId);
    await client.publish(topic, { attrs: { marker: true } });
    assert.equal((await nextWithin(sub)).msgId, msgId);
    assert.equal((await nextWithin(sub)).attrs.marker, true, 'the retry was not delivered');
    await sub.unsubscribe();
  });

  test('unreliable publishes, pipelined without waiting, all arrive in order', async () => {
    const topic = freshTopic();
    const received = [];
    const sub = await client.subscribe(topic, { onEvent: (event) => received.push(event.attrs.n) });
    const replies = [];
    for (let n = 0; n < 3000; n++) {
      replies.push(client.publish(topic, { attrs: { n }, payload: 'x', reliable: false }));
    }
    const results = await Promise.all(replies);
    assert.equal(new Set(results.map((r) => r.msgId)).size, 3000);
    await waitFor(() => received.length === 3000, '3000 events');
    assert.deepEqual(received, [...Array(3000).keys()]);
    await sub.unsubscribe();
  });

  test('malformed requests get typed errors and the connection goes on', async () => {
    await assert.rejects(client.request({ op: 'publish', attrs: {} }),
      (error) => error instanceof BadRequest && error.code === 'bad_request');
    await assert.rejects(client.request({ op: 'no_such_op' }), BadRequest);
    await assert.rejects(client.publish(freshTopic(), { msgId: 'NOT HEX' }), BadRequest);
    await assert.rejects(client.publish(freshTopic(), { attrs: { nested: { a: 1 } } }),
      BadRequest);
    const status = await client.status();
    assert.equal(status.node, client.node);
    assert.equal(typeof status.counters, 'object');
  });

  test('status reports the node and the API counters', async () => {
    const status = await client.status();
    assert.equal(status.ready, true);
    assert.ok(status.api.requests > 0);
  });
});

describe('protocol errors on a raw connection', () => {
  let daemon;
  before(async () => { daemon = await startDaemon(); });
  after(async () => { await daemon?.stop(); });

  test('an unsupported version is refused with its typed error', async () => {
    const replies = await rawExchange(daemon.api, [encodeFrame({ op: 'hello', rid: 1,
      version: 99 })], 1);
    assert.equal(replies[0].ok, false);
    assert.equal(replies[0].error.code, 'unsupported_version');
    // And the client maps it to its class.
    const { RequestError } = await import('../src/errors.js');
    assert.ok(RequestError.fromWire(replies[0].error) instanceof UnsupportedVersion);
  });

  test('a frame that is not CBOR closes that connection only, with bad_frame', async () => {
    const bystander = await connect(daemon.api);
    const topic = `bystander-${process.pid}`;
    const sub = await bystander.subscribe(topic);
    const garbage = Buffer.from([0, 0, 0, 3, 0xff, 0xff, 0xff]);
    const replies = await rawExchange(daemon.api, [garbage], 1);
    assert.equal(replies[0].event, 'error');
    assert.equal(replies[0].error.code, 'bad_frame');
    await bystander.publish(topic, { payload: 'still serving' });
    assert.equal(Buffer.from((await nextWithin(sub)).payload).toString(), 'still serving');
    bystander.close();
  });

  test('a request before hello is a bad_request', async () => {
    const replies = await rawExchange(daemon.api, [encodeFrame({ op: 'status', rid: 5 })], 1);
    assert.equal(replies[0].rid, 5);
    assert.equal(replies[0].error.code, 'bad_request');
  });

  test('the connection lost: pending requests reject with ConnectionClosed', async () => {
    const client = await connect(daemon.api);
    const sub = await client.subscribe('lost');
    const iteration = nextWithin(sub);
    client.socket.destroy();
    await assert.rejects(iteration, ConnectionClosed);
    await assert.rejects(client.status(), ConnectionClosed);
  });

  test('an unreachable daemon is a ConnectionClosed', async () => {
    await assert.rejects(connect(`${daemon.dir}/no-such.sock`), ConnectionClosed);
  });
});

/** Send frames on a fresh connection and collect `count` messages (10 s deadline). */
function rawExchange(socketPath, frames, count) {
  return new Promise((resolve, reject) => {
    const socket = net.createConnection({ path: socketPath });
    const messages = [];
    const reader = new FrameReader(1 << 24);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`got ${messages.length} of ${count} messages within 10 s`));
    }, 10_000);
    socket.on('connect', () => socket.write(Buffer.concat(frames)));
    socket.on('data', (chunk) => {
      reader.push(chunk, (body) => messages.push(cbor.decode(body)));
      if (messages.length >= count) {
        clearTimeout(timer);
        socket.destroy();
        resolve(messages);
      }
    });
    socket.on('error', (error) => { clearTimeout(timer); reject(error); });
  });
}
