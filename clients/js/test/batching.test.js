// Batched publish and batched notify against a real daemon whose max_frame is small, so
// that the byte bound is reached with events of a few kilobytes.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { BadRequest, RequestError, TooLarge, connect } from '../src/index.js';
import { startDaemon, tap, waitFor } from './daemon.js';

const MAX_FRAME = 65536;  // the smallest the daemon accepts

describe(`a daemon with max_frame ${MAX_FRAME}`, () => {
  let daemon;
  before(async () => {
    daemon = await startDaemon({ config: `[limits]\nmax_frame = ${MAX_FRAME}\n` });
  });
  after(async () => { await daemon?.stop(); });

  test('hello tells the features and max_frame', async () => {
    const client = await connect(daemon.api);
    assert.equal(client.maxFrame, MAX_FRAME);
    assert.equal(client.maxBatch, Math.floor(MAX_FRAME / 320));
    assert.ok(client.features.includes('publish_batch'));
    assert.ok(client.features.includes('notify_batch'));
    client.close();
  });

  test('publishMany: a result per event, a bad event refused alone', async () => {
    const client = await connect(daemon.api);
    const received = [];
    await client.subscribe('many', { onEvent: (event) => received.push(event.attrs.n) });
    const frames = tap(client);
    const results = await client.publishMany([
      { topic: 'many', attrs: { n: 1 } },
      { topic: 'many', attrs: { n: 2 }, msgId: 'NOT HEX' },
      { topic: 'many', attrs: { n: 3 }, msgId: 'c0ffee' },
    ]);
    assert.deepEqual(frames.map((f) => [f.op, f.events]), [['publish_batch', 3]],
      'one request');
    assert.ok(Number.isInteger(results[0].seq));
    assert.ok(results[1] instanceof BadRequest && results[1] instanceof RequestError);
    assert.equal(results[2].msgId, 'c0ffee');
    await waitFor(() => received.length === 2, 'the two good events');
    assert.deepEqual(received, [1, 3]);
    client.close();
  });

  test('pipelined publishes go in batches bounded by max_frame at the byte', async () => {
    const client = await connect(daemon.api);
    const received = [];
    await client.subscribe('edge', { onEvent: (event) => received.push(event.payload.length) });
    const frames = tap(client);
    const send = (sizes) => Promise.all(sizes.map((size) => client.publish('edge',
      { payload: Buffer.alloc(size, 0x62), reliable: false })));
    // Three events of 20000 bytes: one batch, whose size tells the fixed overhead (the
    // sizes below stay in the same CBOR length classes, under max_payload; rids stay
    // under 24).
    const p = 20_000;
    await send([p, p, p]);
    assert.deepEqual(frames.map((f) => [f.op, f.events]), [['publish_batch', 3]]);
    const fill = p + MAX_FRAME - frames[0].size;
    await send([p, p, fill]);  // exactly max_frame: one batch
    assert.deepEqual(frames[1], { size: MAX_FRAME, op: 'publish_batch', events: 3 });
    await send([p, p, fill + 1]);  // one byte more: two requests
    assert.deepEqual(frames.slice(2).map((f) => f.events), [2, 1]);
    assert.ok(frames.every((f) => f.size <= MAX_FRAME));
    await waitFor(() => received.length === 9, 'the nine events');
    assert.deepEqual(received, [p, p, p, p, p, fill, p, p, fill + 1]);
    client.close();
  });

  test('many pipelined publishes: few requests, every event delivered in order', async () => {
    const publisher = await connect(daemon.api);
    const subscriber = await connect(daemon.api, { batchNotify: true });
    const plain = await connect(daemon.api, { batchNotify: false, batchPublish: false });
    const got = { batched: [], plain: [] };
    await subscriber.subscribe('burst', { onEvent: (e) => got.batched.push(e.attrs.n) });
    await plain.subscribe('burst', { onEvent: (e) => got.plain.push(e.attrs.n) });
    const frames = tap(publisher);
    const n = 2000;
    const replies = [];
    for (let i = 0; i < n; i++) {
      replies.push(publisher.publish('burst', { attrs: { n: i }, payload: 'p', reliable: i % 2 === 0 }));
    }
    await Promise.all(replies);
    // Reliable and unreliable alternate: each run is one event, so no batching here...
    assert.equal(frames.length, n);
    assert.ok(frames.every((f) => f.op === 'publish'));
    const more = [];
    for (let i = n; i < 2 * n; i++) more.push(publisher.publish('burst', { attrs: { n: i } }));
    await Promise.all(more);
    // ...while a run of one kind goes in batches of up to max_batch events (their replies
    // must fit in max_frame too).
    const batches = frames.slice(n);
    assert.ok(batches.every((f) => f.op === 'publish_batch' && f.events <= publisher.maxBatch));
    assert.ok(batches.length <= Math.ceil(n / publisher.maxBatch) + 2, `${batches.length} requests`);
    await waitFor(() => got.batched.length === 2 * n && got.plain.length === 2 * n,
      'every event to both subscribers');
    const expected = [...Array(2 * n).keys()];
    assert.deepEqual(got.batched, expected);
    assert.deepEqual(got.plain, expected);
    for (const client of [publisher, subscriber, plain]) client.close();
  });

  test('a publish too large for max_frame is refused locally; batching goes on', async () => {
    const client = await connect(daemon.api);
    const results = await Promise.allSettled([
      client.publish('big', { payload: Buffer.alloc(100) }),
      client.publish('big', { payload: Buffer.alloc(MAX_FRAME) }),
      client.publish('big', { payload: Buffer.alloc(100) }),
    ]);
    assert.deepEqual(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled']);
    assert.equal(results[1].reason.code, 'too_large');
    client.close();
  });

  test('events at max_payload and max_event are sent; one byte past is refused unsent',
    async () => {
      const client = await connect(daemon.api);
      assert.equal(client.maxEvent, MAX_FRAME - 16384);
      assert.equal(client.maxPayload, MAX_FRAME - 32768);
      const topic = 'sizé';  // 5 bytes of UTF-8
      const received = [];
      await client.subscribe(topic, { onEvent: (event) => received.push(event.payload.length) });
      const frames = tap(client);
      const payload = (n) => Buffer.alloc(n, 0x61);
      // Size: payload + topic + per attribute name and value (text: UTF-8; number: 8;
      // boolean: 1); pad fills the event to max_event exactly.
      const attrs = (padBytes) => ({ n: 7, f: 0.5, ok: true, 'pâd': 'x'.repeat(padBytes) });
      const fixed = 5 + (1 + 8) + (1 + 8) + (2 + 1) + 4;
      const room = client.maxEvent - client.maxPayload - fixed;
      const isTooLarge = (limit) => (error) => error instanceof TooLarge
        && error.code === 'too_large' && error.message.includes(`(${limit})`)
        && error.extra.max_payload === client.maxPayload;

      await client.publish(topic, { payload: payload(client.maxPayload), reliable: false });
      await client.publish(topic, { payload: payload(client.maxPayload), attrs: attrs(room) });
      const sent = frames.length;
      await assert.rejects(client.publish(topic, { payload: payload(client.maxPayload + 1) }),
        isTooLarge('max_payload'));
      await assert.rejects(client.publish(topic, { payload: payload(client.maxPayload - 1),
        attrs: attrs(room + 2) }), isTooLarge('max_event'));
      assert.equal(frames.length, sent, 'nothing sent for the refused events');

      // The daemon counts the same: the event one byte past, sent as is, is refused there.
      await assert.rejects(client.request({ op: 'publish', topic, reliable: false,
        payload: payload(client.maxPayload - 1), attrs: attrs(room + 2) }),
      (error) => error instanceof TooLarge && error.message.includes('(max_event)'));

      // In a batch the refused event gets its error; the others go on.
      const results = await client.publishMany([
        { topic, payload: payload(10) },
        { topic, payload: payload(client.maxPayload + 1) },
        { topic, payload: payload(20) },
      ]);
      assert.ok(isTooLarge('max_payload')(results[1]));
      assert.equal(frames.at(-1).events, 2);
      await waitFor(() => received.length === 4, 'the four events sent');
      assert.deepEqual(received, [client.maxPayload, client.maxPayload, 10, 20]);
      client.close();
    });

  test('request() resolves a publish or publish_batch with its reply map, as any', async () => {
    const client = await connect(daemon.api);
    const batch = await client.request({ op: 'publish_batch', reliable: false,
      events: [{ topic: 'raw' }, { topic: 'raw', msg_id: 'NOT HEX' }] });
    assert.equal(batch.ok, true);
    assert.equal(batch.results.length, 2);
    assert.equal(batch.results[1].error.code, 'bad_request');
    const one = await client.request({ op: 'publish', topic: 'raw', msg_id: 'ab' });
    assert.deepEqual([one.ok, one.msg_id], [true, 'ab']);
    client.close();
  });

  test('any request over max_frame is refused unsent; the connection goes on', async () => {
    const client = await connect(daemon.api);
    const frames = tap(client);
    await assert.rejects(client.subscribe('t', { filter: 'x'.repeat(MAX_FRAME) }),
      (error) => error instanceof TooLarge && error.extra.max_frame === MAX_FRAME);
    assert.equal(frames.length, 0);
    assert.equal((await client.status()).limits.max_frame, MAX_FRAME);
    client.close();
  });
});
