// Durable consumers (docs/API.md, "Durable consumers") from the client, against real
// daemons: push with ack, nak, term, pull with fetch, a work queue, conflicts, the
// consumers report, delete (the ended push), ttl, and the limits at their edges.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  BadRequest,
  Conflict,
  DurableEvent,
  DurableSubscription,
  RequestError,
  Subscription,
  connect,
} from '../src/index.js';
import { cbor } from '../src/frames.js';
import { nextWithin, startDaemon, tap, waitFor, within } from './daemon.js';

/** `count` events of a subscription, each within `timeout` ms. */
async function take(subscription, count, timeout = 10_000) {
  const events = [];
  for (let i = 0; i < count; i++) events.push(await nextWithin(subscription, timeout));
  return events;
}

/** The consumers report of one consumer. */
async function report(client, topic, durable) {
  const { consumers, more } = await client.consumers(topic, durable);
  assert.equal(more, false);
  assert.equal(consumers.length, 1, `one consumer ${durable} of ${topic}`);
  return consumers[0];
}

/** Resolve with the report once `check(report)` holds (10 s deadline). */
async function reportWhen(client, topic, durable, check, what) {
  let last;
  await waitFor(async () => check(last = await report(client, topic, durable)),
    `${what} (last report ${JSON.stringify(last)})`);
  return last;
}

describe('durable consumers on one daemon', () => {
  let daemon;
  let client;
  let topicCount = 0;
  const freshTopic = () => `durable-${process.pid}-${++topicCount}`;

  before(async () => {
    daemon = await startDaemon();
    client = await connect(daemon.api, { clientName: 'js-durable-tests' });
  });
  after(async () => {
    client?.close();
    await daemon?.stop();
  });

  test('hello offers durable consumers', () => {
    assert.ok(client.features.includes('durable'));
  });

  test('push with ack: acknowledged events stay done, an unacknowledged one comes again',
    async () => {
      const topic = freshTopic();
      const sub = await client.subscribe(topic, { durable: 'workers', ack: true, ackWait: 1 });
      assert.ok(sub instanceof DurableSubscription);
      assert.equal(sub.durable, 'workers');
      const published = [];
      for (let n = 0; n < 3; n++) published.push(await client.publish(topic, { attrs: { n } }));
      const first = await take(sub, 3);
      assert.deepEqual(first.map((e) => e.msgId), published.map((p) => p.msgId));
      assert.deepEqual(first.map((e) => e.attempt), [1, 1, 1]);
      assert.ok(first.every((e) => e instanceof DurableEvent && e.topic === topic
        && e.sub === sub.id));
      await first[0].ack();                // by the event
      await sub.ack([first[1].msgId]);     // by msg_id, on the subscription
      // The third, never acknowledged, is delivered again after ack_wait (1 s).
      const again = await nextWithin(sub);
      assert.equal(again.msgId, first[2].msgId);
      assert.equal(again.attempt, 2);
      assert.equal(again.seq, first[2].seq);
      assert.equal(again.attrs.n, 2);
      await again.ack();
      // Everything done: the acknowledged two were never delivered again.
      const done = await reportWhen(client, topic, 'workers',
        (r) => r.ackFloor === published[2].seq && r.inflight === 0, 'all acknowledged');
      assert.equal(done.redelivered, 1);
      assert.equal(done.pending, 0);
      await sub.unsubscribe();
    });

  test('nak: at once, or after its delay; attempt counts on', async () => {
    const topic = freshTopic();
    const sub = await client.subscribe(topic, { durable: 'nak', ack: true, ackWait: 60 });
    const { msgId } = await client.publish(topic, { payload: 'again' });
    const first = await nextWithin(sub);
    assert.equal(first.attempt, 1);
    await first.nak();
    const second = await nextWithin(sub, 5_000);  // long before ack_wait
    assert.deepEqual([second.msgId, second.attempt], [msgId, 2]);
    const naked = Date.now();
    await sub.nak(second, 1);
    const third = await nextWithin(sub);
    assert.deepEqual([third.msgId, third.attempt], [msgId, 3]);
    assert.ok(Date.now() - naked >= 900, `again after ${Date.now() - naked} ms, delay 1 s`);
    await third.ack();
    await sub.unsubscribe();
  });

  test('term ends an event: it is never delivered again', async () => {
    const topic = freshTopic();
    const sub = await client.subscribe(topic, { durable: 'term', ack: true, ackWait: 1 });
    const ended = await client.publish(topic, { attrs: { n: 1 } });
    const event = await nextWithin(sub);
    await event.term();
    const marker = await client.publish(topic, { attrs: { n: 2 } });
    const next = await nextWithin(sub);
    assert.deepEqual([next.msgId, next.attempt], [marker.msgId, 1]);
    await sub.term([next]);  // events themselves name what to settle too
    const done = await reportWhen(client, topic, 'term',
      (r) => r.ackFloor === marker.seq && r.inflight === 0, 'both ended');
    assert.ok(ended.seq < marker.seq);
    assert.equal(done.redelivered, 0, 'no event came again');
    assert.equal(done.pending, 0);
    await sub.unsubscribe();
  });

  test('pull: fetch takes up to max, wait 0 answers at once, wait > 0 waits for the first',
    async () => {
      const topic = freshTopic();
      const sub = await client.subscribe(topic, { durable: 'pull', ack: true, pull: true });
      let started = Date.now();
      assert.deepEqual(await sub.fetch({ wait: 0 }), []);
      assert.deepEqual(await sub.fetch(), [], 'the defaults: max 1, wait 0');
      assert.ok(Date.now() - started < 2_000, 'answered at once');
      const published = [];
      for (let n = 0; n < 5; n++) published.push(await client.publish(topic, { attrs: { n } }));
      const three = await sub.fetch({ max: 3, wait: 5 });
      assert.deepEqual(three.map((e) => e.attrs.n), [0, 1, 2]);
      assert.ok(three.every((e) => e instanceof DurableEvent && e.attempt === 1));
      const rest = await sub.fetch({ max: 10, wait: 5 });
      assert.deepEqual(rest.map((e) => e.msgId), published.slice(3).map((p) => p.msgId));
      await sub.ack([...three, ...rest]);
      // A fetch waiting for the first event: answered when it is published.
      started = Date.now();
      const waiting = sub.fetch({ max: 10, wait: 30 });
      const late = await client.publish(topic, { attrs: { n: 5 } });
      const got = await waiting;
      assert.deepEqual(got.map((e) => e.msgId), [late.msgId]);
      assert.ok(Date.now() - started < 10_000, 'not the whole wait');
      await got[0].ack();
      await reportWhen(client, topic, 'pull', (r) => r.ackFloor === late.seq && r.inflight === 0,
        'all acknowledged');
      await sub.unsubscribe();
    });

  test('a work queue: the members of one consumer share its events', async () => {
    const topic = freshTopic();
    const other = await connect(daemon.api);
    const got = [[], []];
    const members = [];
    for (const [i, member] of [client, other].entries()) {
      members.push(await member.subscribe(topic, { durable: 'queue', ack: true,
        onEvent: (event) => { got[i].push(event.attrs.n); event.ack(); } }));
    }
    assert.equal((await report(client, topic, 'queue')).members, 2);
    for (let n = 0; n < 40; n++) await client.publish(topic, { attrs: { n } });
    await waitFor(() => got[0].length + got[1].length >= 40, '40 events to the queue');
    assert.deepEqual([...got[0], ...got[1]].sort((a, b) => a - b), [...Array(40).keys()],
      'each event to exactly one member');
    assert.ok(got[0].length > 0 && got[1].length > 0, `shared: ${got[0].length}/${got[1].length}`);
    await reportWhen(client, topic, 'queue', (r) => r.inflight === 0 && r.pending === 0,
      'all acknowledged');
    for (const member of members) await member.unsubscribe();
    other.close();
  });

  test('a second subscribe with other settings or another filter is a Conflict', async () => {
    const topic = freshTopic();
    const first = await client.subscribe(topic, { durable: 'c', ack: true, filter: 'n > 1' });
    for (const options of [{ ack: true, ackWait: 5, filter: 'n > 1' }, { filter: 'n > 1' },
      { ack: true, filter: 'n > 2' }, { ack: true, filter: 'n > 1', pull: true }]) {
      await assert.rejects(client.subscribe(topic, { durable: 'c', ...options }),
        (error) => error instanceof Conflict && error.code === 'conflict'
          && error instanceof RequestError, JSON.stringify(options));
    }
    // The same filter and settings (defaults spelled out or not) attach.
    const second = await client.subscribe(topic, { durable: 'c', ack: true, filter: 'n > 1',
      ackWait: 30, maxDeliver: 5, maxInflight: 256, pull: false });
    assert.equal((await report(client, topic, 'c')).members, 2);
    await first.unsubscribe();
    await second.unsubscribe();
  });

  test('consumers reports settings, pending and in flight (max_inflight bounds it)',
    async () => {
      const topic = freshTopic();
      assert.deepEqual(await client.consumers(topic), { consumers: [], more: false });
      const sub = await client.subscribe(topic, { durable: 'r', ack: true, maxInflight: 2,
        filter: "kind = 'task'", deadLetter: `${topic}-dead`, maxDeliver: 3, ackWait: 20 });
      const seqs = [];
      for (let n = 0; n < 5; n++) {
        seqs.push((await client.publish(topic, { attrs: { kind: 'task', n } })).seq);
      }
      const [a, b] = await take(sub, 2);
      const held = await reportWhen(client, topic, 'r', (r) => r.pending === 3,
        'three pending behind max_inflight');
      assert.deepEqual(held, {
        durable: 'r', filter: "kind = 'task'", ack: true, ackWait: 20, maxDeliver: 3,
        deadLetter: `${topic}-dead`, maxInflight: 2, pull: false, pending: 3, inflight: 2,
        members: 1, redelivered: 0, deadLettered: 0, ackFloor: 0,
      });
      await a.ack();
      assert.equal((await nextWithin(sub)).attrs.n, 2, 'room for one more');
      await b.ack();
      await reportWhen(client, topic, 'r', (r) => r.ackFloor === seqs[1] && r.inflight === 2
        && r.pending === 1, 'two acknowledged');
      // Another consumer of the topic: the report lists both; by name, one.
      const other = await client.subscribe(topic, { durable: 'other', pull: true });
      const all = await client.consumers(topic);
      assert.deepEqual(all.consumers.map((c) => c.durable).sort(), ['other', 'r']);
      assert.equal(all.more, false);
      assert.equal((await report(client, topic, 'other')).pull, true);
      await sub.unsubscribe();
      await other.unsubscribe();
    });

  test('deleteConsumer ends every attached subscription with the ended push', async () => {
    const topic = freshTopic();
    const sub = await client.subscribe(topic, { durable: 'gone', ack: true });
    const twin = await client.subscribe(topic, { durable: 'gone', ack: true });
    const iterated = [];
    const loop = (async () => {
      for await (const event of sub) iterated.push(event);
    })();
    const waiting = nextWithin(twin);
    assert.equal(await client.deleteConsumer(topic, 'gone'), true);
    await within(loop, 'end of the for-await loop');
    assert.equal(await waiting, null);
    for (const ended of [sub, twin]) {
      assert.ok(ended.ended instanceof RequestError, 'ended by the ended push');
      assert.equal(ended.ended.code, 'deleted');
      assert.equal(ended.expired, false);
      assert.equal(await nextWithin(ended), null);
    }
    assert.deepEqual(iterated, []);
    assert.deepEqual(await client.consumers(topic), { consumers: [], more: false });
    assert.equal(await client.deleteConsumer(topic, 'gone'), false, 'no such consumer now');
  });

  test('an event past its ttl is not fetched; one within it is', async () => {
    const topic = freshTopic();
    const sub = await client.subscribe(topic, { durable: 'ttl', ack: true, pull: true });
    const ttl = 0.5;
    const short = await client.publish(topic, { attrs: { n: 1 }, ttl });
    const sent = Date.now();  // the event's ts is before this
    const kept = await client.publish(topic, { attrs: { n: 2 }, ttl: 3600 });
    const plain = await client.publish(topic, { attrs: { n: 3 } });
    await waitFor(() => Date.now() > sent + ttl * 1000 + 100, 'the ttl to pass');
    const events = await sub.fetch({ max: 10, wait: 5 });
    assert.deepEqual(events.map((e) => e.msgId), [kept.msgId, plain.msgId]);
    assert.ok(short.seq < kept.seq);
    await sub.ack(events);
    await sub.unsubscribe();
  });

  test('dead letters: past max_deliver an event goes to dead_letter with its origin',
    async () => {
      const topic = freshTopic();
      const deadTopic = `${topic}-dead`;
      const dead = await client.subscribe(deadTopic);
      const sub = await client.subscribe(topic, { durable: 'dl', ack: true, maxDeliver: 1,
        deadLetter: deadTopic });
      const { msgId } = await client.publish(topic, { attrs: { job: 'x' }, payload: 'p' });
      await (await nextWithin(sub)).nak();
      const letter = await nextWithin(dead);
      assert.deepEqual(Buffer.from(letter.payload).toString(), 'p');
      assert.deepEqual(letter.attrs, { job: 'x', dead_topic: topic, dead_msg_id: msgId,
        dead_attempts: 1, dead_consumer: 'dl' });
      assert.equal(letter.attempt, 1, 'a plain subscription: attempt 1');
      assert.ok(!(letter instanceof DurableEvent) && !(dead instanceof DurableSubscription));
      assert.equal((await report(client, topic, 'dl')).deadLettered, 1);
      await sub.unsubscribe();
      await dead.unsubscribe();
    });

  test('misuse the daemon refuses: ack without ack, fetch without pull', async () => {
    const topic = freshTopic();
    const sub = await client.subscribe(topic, { durable: 'noack' });
    await client.publish(topic, { attrs: { n: 1 } });
    const event = await nextWithin(sub);
    assert.equal(event.attempt, 1);
    await assert.rejects(event.ack(), BadRequest);
    await assert.rejects(sub.fetch(), BadRequest);
    await assert.rejects(client.request({ op: 'ack', sub: sub.id }), BadRequest,
      'neither msg_id nor msg_ids');
    await sub.unsubscribe();
    await assert.rejects(sub.ack('ab'), (error) => error.code === 'unknown_sub');
    await assert.rejects(sub.ack(42), TypeError);
    await sub.ack([]);  // nothing to settle: nothing asked
  });

  test('durable settings without durable, or durable with expiry, replay or group, are '
    + 'refused before sending, as the daemon refuses them', async () => {
    const topic = freshTopic();
    const client = await connect(daemon.api);
    const frames = tap(client);
    const cases = [
      [{ ack: false }, { ack: false }, "'ack' is for a durable subscription"],
      [{ ackWait: 1, pull: true }, { ack_wait: 1, pull: true }, "'ack_wait' is for"],
      [{ durable: 'd', expiry: 5 }, { durable: 'd', expiry: 5 }, "'expiry' is not for"],
      [{ durable: 'd', group: 'g' }, { durable: 'd', group: 'g' }, "'group' is not for"],
      [{ durable: 'd', replay: { last: 1 } }, { durable: 'd', replay: { last: 1 } },
        "'replay' is not for"],
    ];
    for (const [options, fields, message] of cases) {
      const same = (error) => error instanceof BadRequest && error.message.includes(message);
      await assert.rejects(client.subscribe(topic, options), same, JSON.stringify(options));
      await assert.rejects(client.request({ op: 'subscribe', topic, ...fields }), same,
        `the daemon: ${JSON.stringify(fields)}`);
    }
    assert.deepEqual(frames.map((f) => f.op), cases.map(() => 'subscribe'),
      'only the raw requests were sent');
    // null settings are the defaults, as on the wire.
    const sub = await client.subscribe(topic, { ack: null, group: null });
    assert.ok(sub instanceof Subscription && !(sub instanceof DurableSubscription));
    client.close();
  });

  test('the limits of durable requests at their edges', async () => {
    const topic = freshTopic();
    let names = 0;
    const attach = (options) => client.subscribe(topic, { durable: `edge${++names}`, ...options });
    const accepted = [];
    for (const options of [{ ackWait: 86_400, ack: true }, { ackWait: 0.001, ack: true },
      { maxDeliver: 1 }, { maxDeliver: 1000 }, { maxInflight: 1 }, { maxInflight: 65_536 }]) {
      accepted.push(await attach(options));
    }
    for (const options of [{ ackWait: 86_400.001 }, { ackWait: 0 }, { maxDeliver: 0 },
      { maxDeliver: 1001 }, { maxInflight: 0 }, { maxInflight: 65_537 }, { deadLetter: '' },
      { deadLetter: 'x'.repeat(1025) }]) {
      await assert.rejects(attach(options), BadRequest, JSON.stringify(options));
    }
    accepted.push(await attach({ deadLetter: 'x'.repeat(1024) }));
    // The consumer's name: 1 to 256 characters.
    accepted.push(await client.subscribe(topic, { durable: 'n'.repeat(256) }));
    await assert.rejects(client.subscribe(topic, { durable: 'n'.repeat(257) }), BadRequest);
    await assert.rejects(client.subscribe(topic, { durable: '' }), BadRequest);
    await assert.rejects(client.consumers(topic, 'n'.repeat(257)), BadRequest);

    // fetch: max in [1, 10000], wait in [0, 3600] (an event waits, so none is waited for).
    const pull = await client.subscribe(topic, { durable: 'edge-pull', ack: true, pull: true });
    await client.publish(topic, { attrs: { n: 1 } });
    const [event] = await within(pull.fetch({ max: 10_000, wait: 3600 }), 'fetch answer');
    assert.equal(event.attrs.n, 1);
    for (const options of [{ max: 10_001 }, { max: 0 }, { wait: 3600.001 }, { wait: -0.001 }]) {
      await assert.rejects(pull.fetch(options), BadRequest, JSON.stringify(options));
    }
    // nak's delay: [0, 86400].
    await event.nak(86_400);
    for (const delay of [86_400.001, -0.001]) {
      await assert.rejects(event.nak(delay), BadRequest, `delay ${delay}`);
    }
    await pull.term([event]);
    // publish's ttl: (0, 315360000].
    await client.publish(topic, { ttl: 315_360_000 });
    for (const ttl of [315_360_000.001, 0, -1]) {
      await assert.rejects(client.publish(topic, { ttl }), BadRequest, `ttl ${ttl}`);
    }
    for (const sub of [...accepted, pull]) await sub.unsubscribe();
  });
});

describe('acknowledgements cut by max_frame', () => {
  const MAX_FRAME = 65536;
  let daemon;
  before(async () => {
    daemon = await startDaemon({ config: `[limits]\nmax_frame = ${MAX_FRAME}\n` });
  });
  after(async () => { await daemon?.stop(); });

  test('msg_ids filling max_frame to the byte go in one request; one more, in two',
    async () => {
      const client = await connect(daemon.api);
      const sub = await client.subscribe('acks', { durable: 'a', ack: true });
      const frames = tap(client);
      // Ids of 64 hex digits (66 bytes of CBOR each) and one shorter that fills the frame.
      const id = (n, digits = 64) => n.toString(16).padStart(digits, '0');
      const rid = 3;  // hello 1, subscribe 2: the first acknowledgement's rid
      const fixed = cbor.encode({ op: 'ack', sub: sub.id, msg_ids: [], rid }).length - 1;
      const full = [];
      let size = fixed + 3;  // a list of 256 to 65535 items has a 3-byte head
      while (size + 66 + 26 <= MAX_FRAME) {
        full.push(id(full.length));
        size += 66;
      }
      let rest = MAX_FRAME - size;  // 26 to 91 bytes: one or two ids of 24 to 64 digits
      if (rest > 66) {
        full.push(id(full.length, rest - 28));
        rest = 26;
      }
      full.push(id(full.length, rest - 2));
      await sub.ack(full);  // ids in flight to no one: ignored, answered ok
      assert.deepEqual(frames, [{ size: MAX_FRAME, op: 'ack', msgIds: full.length }]);
      await sub.nak([...full, id(full.length)]);  // 'nak' is as long as 'ack'
      assert.deepEqual(frames.slice(1).map((f) => [f.op, f.msgIds]),
        [['nak', full.length], ['nak', 1]]);
      // 'term' takes a byte more, a nak's delay more still: the ids no longer fit one.
      await sub.term(full);
      await sub.nak(full, 0.5);
      assert.deepEqual(frames.slice(3).map((f) => [f.op, f.msgIds]),
        [['term', full.length - 1], ['term', 1], ['nak', full.length - 1], ['nak', 1]]);
      assert.ok(frames.every((f) => f.size <= MAX_FRAME));
      // One id alone goes as msg_id.
      await sub.nak(id(7), 0.5);
      assert.deepEqual(frames.at(-1), { size: frames.at(-1).size, op: 'nak' });
      client.close();
    });
});

describe('an unstructured daemon', () => {
  let daemon;
  before(async () => { daemon = await startDaemon({ config: 'mode = "unstructured"\n' }); });
  after(async () => { await daemon?.stop(); });

  test('offers no durable consumers and refuses them and ttl', async () => {
    const client = await connect(daemon.api);
    assert.equal(client.mode, 'unstructured');
    assert.ok(!client.features.includes('durable'));
    await assert.rejects(client.subscribe('t', { durable: 'd' }), BadRequest);
    await assert.rejects(client.consumers('t'), BadRequest);
    await assert.rejects(client.deleteConsumer('t', 'd'), BadRequest);
    await assert.rejects(client.publish('t', { ttl: 5 }), BadRequest);
    client.close();
  });
});
