// Acknowledged consumption: the overlay's durable consumers against RabbitMQ (a durable
// queue, persistent messages, a consumer with manual acks and a prefetch) and NATS
// JetStream (file storage, a durable pull consumer fetching batches), every system driven
// from Node.js with the same loops, the same 100-byte payloads.
//
//   node bench/throughput/consumers.mjs [--events 20000] [--rounds 3] [--prefetch 256]
//        [--batch 100] [--daemons 1,4] [--systems a,b]
//
// For each system and round: the topic (queue, stream) is filled with `events` durable
// events first (not timed), then one consumer takes them all and acknowledges each; the
// rate is events acknowledged per second, from the first delivery asked for to the last
// acknowledgement sent (the overlay's acks are answered by the daemon: the last reply
// counts; RabbitMQ's and JetStream's acks are not answered: the last one written counts).
//   push: the overlay's `subscribe` with `durable`, `ack`, `max_inflight` = prefetch;
//         RabbitMQ `basic.consume` with `prefetch`. (JetStream: pull only here.)
//   pull: the overlay's `fetch` of `batch`; JetStream's `fetch` of `batch` from a durable
//         pull consumer. (RabbitMQ's `basic.get` takes one message a request: not run.)
// Then the redelivery latency: a consumer takes `prefetch` events and dies (its socket
// destroyed, no ack), a second consumer of the same queue is waiting; the time from the
// death to the second one's first delivery of a dead consumer's event. The overlay and
// RabbitMQ notice the closed connection; JetStream redelivers after its AckWait (set to
// 2 s here: it cannot know the pull client died).
//
// Overlay setups: 1 daemon and 4 (publisher on the first daemon, consumer on the last;
// `[storage] sync = "always"`, replicas 2; retention raised to hold every round's events,
// as the brokers' queues and streams do). Rounds run the systems in a rotated order;
// ratios (overlay / broker) are taken within each round, then their median.
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

import { blast } from './publish.mjs';
import { jetstreamSystem, rabbitSystem } from './brokers.mjs';
import { ADAPTERS, startOverlay } from './systems.mjs';

const run = promisify(execFile);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function parseArgs(argv) {
  const options = { events: 20000, rounds: 3, prefetch: 256, batch: 100, daemons: [1, 4],
    systems: null };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (flag === '--events') options.events = Number(value);
    else if (flag === '--rounds') options.rounds = Number(value);
    else if (flag === '--prefetch') options.prefetch = Number(value);
    else if (flag === '--batch') options.batch = Number(value);
    else if (flag === '--daemons') options.daemons = value.split(',').map(Number);
    else if (flag === '--systems') options.systems = value.split(',');
    else throw new Error(`unknown option ${flag}`);
  }
  return options;
}

// -- the overlay --------------------------------------------------------------------------

async function overlaySystem(work, nodes, events) {
  const dir = path.join(work, `overlay-${nodes}`);
  await mkdir(dir, { recursive: true });
  // A topic's log keeps 1,024 events by default: a consumer made after the fill would
  // find only those (the rest trimmed, as a JetStream stream's limits drop messages).
  // The queues and streams of the brokers keep everything: so does the overlay here.
  const cluster = await startOverlay(dir, nodes,
    `[protocol]\nretain_count = ${Math.max(4 * events, 1024)}\nretain_seconds = 3600\n`);
  const { connect } = await import('@overlay/client');
  const publishing = await ADAPTERS.overlay(true);
  const consumerApi = cluster.apis[nodes - 1];
  return {
    publisher: (topic) => publishing.publisher(cluster.apis[0], topic),
    async push(topic, count, prefetch) {
      const client = await connect(consumerApi, { clientName: 'bench-consumer' });
      const sub = await client.subscribe(topic, { durable: 'bench', ack: true,
        maxInflight: prefetch });
      const acks = [];
      for await (const event of sub) {
        acks.push(event.ack());
        if (acks.length === count) break;
      }
      await Promise.all(acks);
      client.close();
    },
    async pull(topic, count, batch) {
      const client = await connect(consumerApi, { clientName: 'bench-puller' });
      const sub = await client.subscribe(topic, { durable: 'bench', ack: true, pull: true,
        maxInflight: batch });
      let taken = 0;
      while (taken < count) {
        const events = await sub.fetch({ max: batch, wait: 5 });
        if (!events.length) throw new Error(`fetch came back empty after ${taken}`);
        await sub.ack(events.map((event) => event.msgId));
        taken += events.length;
      }
      await sub.unsubscribe();
      client.close();
    },
    async redelivery(topic, prefetch) {
      const settings = { durable: 'again', ack: true, ackWait: 30, maxInflight: prefetch };
      const dying = await connect(consumerApi, { clientName: 'bench-dying' });
      const held = await dying.subscribe(topic, settings);
      const mine = new Set();
      while (mine.size < prefetch) {
        // next(), not a for-await loop: leaving one unsubscribes, and the events would go
        // back at once rather than at the consumer's death.
        const event = await held.next();
        mine.add(event.msgId);
      }
      const other = await connect(cluster.apis[0], { clientName: 'bench-heir' });
      const heir = await other.subscribe(topic, settings);
      const t0 = performance.now();
      dying.socket.destroy(); // as a crash leaves it: no unsubscribe, no goodbye
      for await (const event of heir) {
        if (mine.has(event.msgId)) break;
        event.ack(); // the heir's own share: room for the dead one's events
      }
      const ms = performance.now() - t0;
      other.close();
      return ms;
    },
    stop: cluster.stop,
  };
}

// -- RabbitMQ -----------------------------------------------------------------------------

async function rabbitConsumers(work) {
  const rabbit = await rabbitSystem(work);
  if (rabbit === null) return null;
  const amqp = (await import('amqplib')).default;
  const open = () => amqp.connect(rabbit.url);
  return {
    publisher: rabbit.publisher,
    async push(queue, count, prefetch) {
      const connection = await open();
      const channel = await connection.createChannel();
      await channel.assertQueue(queue, { durable: true });
      await channel.prefetch(prefetch);
      let taken = 0;
      await new Promise((resolve, reject) => {
        channel.consume(queue, (msg) => {
          channel.ack(msg);
          if (++taken === count) resolve();
        }, { noAck: false }).catch(reject);
      });
      await connection.close();
    },
    pull: null,
    async redelivery(queue, prefetch) {
      const dying = await open();
      const dyingChannel = await dying.createChannel();
      await dyingChannel.assertQueue(queue, { durable: true });
      await dyingChannel.prefetch(prefetch);
      const mine = new Set();
      await new Promise((resolve) => {
        dyingChannel.consume(queue, (msg) => {
          mine.add(msg.content.toString('latin1'));
          if (mine.size === prefetch) resolve();
        }, { noAck: false });
      });
      const other = await open();
      const channel = await other.createChannel();
      await channel.prefetch(prefetch);
      let t0 = 0;
      const first = new Promise((resolve) => {
        channel.consume(queue, (msg) => {
          if (t0 && mine.has(msg.content.toString('latin1'))) resolve(performance.now() - t0);
          else channel.ack(msg); // the heir's own share: room for the dead one's messages
        }, { noAck: false });
      });
      await sleep(200); // the heir's consume is registered
      dying.on('error', () => {}); // its heartbeats stop: the error is the point
      t0 = performance.now();
      dying.connection.stream.destroy();
      const ms = await first;
      await other.close().catch(() => {});
      return ms;
    },
    stop: rabbit.stop,
  };
}

// -- NATS JetStream -----------------------------------------------------------------------

async function jetstreamConsumers(work) {
  const js = await jetstreamSystem(work, false);
  if (js === null) return null;
  const { connect, AckPolicy } = await import('nats');
  const consumerOf = async (client, topic, ackWaitSeconds) => {
    const manager = await client.jetstreamManager();
    const name = `c_${topic}`;
    await manager.consumers.add('BENCH', { durable_name: name, ack_policy: AckPolicy.Explicit,
      filter_subject: `bench.${topic}`, ack_wait: ackWaitSeconds * 1e9, max_ack_pending: -1 });
    return client.jetstream().consumers.get('BENCH', name);
  };
  return {
    publisher: js.publisher,
    push: null,
    async pull(topic, count, batch) {
      const client = await connect({ servers: js.servers });
      const consumer = await consumerOf(client, topic, 30);
      let taken = 0;
      while (taken < count) {
        const messages = await consumer.fetch({ max_messages: batch, expires: 5000 });
        let got = 0;
        for await (const msg of messages) {
          msg.ack();
          got++;
        }
        if (!got) throw new Error(`fetch came back empty after ${taken}`);
        taken += got;
      }
      await client.flush();
      await client.close();
    },
    async redelivery(topic, prefetch) {
      const dying = await connect({ servers: js.servers });
      const consumer = await consumerOf(dying, topic, 2);
      const mine = new Set();
      const messages = await consumer.fetch({ max_messages: prefetch, expires: 5000 });
      for await (const msg of messages) mine.add(msg.seq);
      const other = await connect({ servers: js.servers });
      const heir = await other.jetstream().consumers.get('BENCH', `c_${topic}`);
      const t0 = performance.now();
      await dying.close();
      for (;;) {
        const next = await heir.fetch({ max_messages: 1, expires: 5000 });
        let found = false;
        for await (const msg of next) {
          if (mine.has(msg.seq)) found = true;
          else msg.ack();
        }
        if (found) break;
      }
      const ms = performance.now() - t0;
      await other.close();
      return ms;
    },
    stop: js.stop,
  };
}

// -- measuring ----------------------------------------------------------------------------

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

const fmt = (n, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d,
  minimumFractionDigits: d });

async function fill(system, topic, count, round) {
  const publisher = await system.publisher(topic);
  await blast(publisher, count, 256, 100, round);
  await publisher.close();
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const work = await mkdtemp(path.join(os.tmpdir(), 'overlay-consumers-'));
  const { stdout: load } = await run('uptime');
  console.log(`load before: ${load.trim()}`);
  console.log(`events ${options.events} x 100 B, prefetch ${options.prefetch}, fetch batch `
    + `${options.batch}, rounds ${options.rounds}; work dir ${work}`);
  const makers = {};
  for (const nodes of options.daemons) {
    makers[`overlay ${nodes}d`] = () => overlaySystem(work, nodes, options.events);
  }
  makers.rabbitmq = () => rabbitConsumers(work);
  makers.jetstream = () => jetstreamConsumers(work);
  const names = Object.keys(makers).filter((n) => !options.systems
    || options.systems.some((s) => n.includes(s)));
  const systems = {};
  try {
    for (const name of names) {
      try {
        const system = await makers[name]();
        if (system === null) console.log(`${name}: not installed, skipped`);
        else systems[name] = system;
      } catch (error) {
        console.log(`${name}: could not start (${error.message}), skipped`);
      }
    }
    const results = {};
    const order = Object.keys(systems);
    for (let round = 0; round < options.rounds; round++) {
      const rotated = [...order.slice(round % order.length), ...order.slice(0, round % order.length)];
      for (const name of rotated) {
        const system = systems[name];
        for (const mode of ['push', 'pull']) {
          if (!system[mode]) continue;
          const topic = `${mode}${round}`;
          await fill(system, topic, options.events, round + 1);
          const t0 = performance.now();
          await system[mode](topic, options.events, mode === 'push' ? options.prefetch
            : options.batch);
          const rate = options.events / ((performance.now() - t0) / 1000);
          (results[`${name} ${mode}`] ??= []).push(rate);
          console.log(`round ${round + 1} ${name} ${mode}: ${fmt(rate)} acknowledged/s`);
        }
        const topic = `again${round}`;
        await fill(system, topic, options.prefetch * 2, round + 1);
        const ms = await system.redelivery(topic, options.prefetch);
        (results[`${name} redelivery ms`] ??= []).push(ms);
        console.log(`round ${round + 1} ${name} redelivery: ${fmt(ms, 1)} ms`);
      }
    }
    console.log('\nwhat                             median        rounds');
    for (const [what, values] of Object.entries(results)) {
      const d = what.endsWith('ms') ? 1 : 0;
      console.log(`${what.padEnd(32)}${fmt(median(values), d).padStart(10)}    `
        + values.map((v) => fmt(v, d)).join(' / '));
    }
    console.log('\nratios within each round, then the median (> 1: the overlay is faster)');
    for (const nodes of options.daemons) {
      for (const [mine, theirs] of [['push', 'rabbitmq push'], ['pull', 'jetstream pull']]) {
        const a = results[`overlay ${nodes}d ${mine}`];
        const b = results[theirs];
        if (!a || !b) continue;
        const per = a.map((r, i) => r / b[i]);
        console.log(`overlay ${nodes}d ${mine} / ${theirs}: ${fmt(median(per), 2)} `
          + `(rounds: ${per.map((r) => fmt(r, 2)).join(', ')})`);
      }
    }
  } finally {
    for (const system of Object.values(systems)) await system.stop();
    const { stdout: after } = await run('uptime');
    console.log(`load after: ${after.trim()}`);
    await rm(work, { recursive: true, force: true });
  }
}

await main();
