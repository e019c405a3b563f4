// Fair throughput and latency: the overlay and the brokers driven by one Node.js harness.
//
//   node bench/throughput/run.mjs [--quick] [--rounds 3] [--events 50000] [--window 512]
//        [--sizes 100,4096] [--subs 1,10] [--daemons 1,10] [--systems a,b] [--no-native]
//        [--paced-events 2000] [--paced-rate 1000] [--topics 3]
//
// Systems: the overlay through clients/js (unreliable and reliable publishes), Mosquitto
// through npm mqtt (QoS 0 and 1), Redis pub/sub through npm redis, NATS core through npm
// nats; brokers from Debian's packages (bench/throughput/setup.sh), started here on free
// loopback ports, skipped with a message when missing. The same payloads (payload.mjs),
// the same publisher loop, subscribers in a process of their own (subscriber.mjs).
//
// Setups: 1 daemon (publisher and subscribers on it) and 10 daemons (`overlay cluster
// up`; the publisher on n00, subscriber i on daemon 1 + i % 9), against one broker with
// the same publisher and subscribers. Among several daemons a topic's name decides where
// its tree lies (its root is the daemon owning the name's key: the publisher's, a
// subscriber's or another, one hop or more away), and with it the figure: each such
// setup runs `--topics` topics, each printed with its root and the subscribers' depth,
// then the ratios over all their rounds together. Per setup, subscriber count and size:
//   throughput  `--events` events as fast as the publisher can send them with `--window`
//               unacknowledged (overlay: replies; MQTT: PUBACK at QoS 1, the socket
//               write at QoS 0; Redis: replies; NATS: a flush every `--window`).
//               events/s = events each subscriber got / (last receipt - first send);
//               MB/s = payload bytes delivered to all subscribers per second.
//               Rounds run the systems in a rotated order (A B C, B C A, ...), so that
//               load moving on the machine falls on all alike; each ratio is taken per
//               round (overlay and broker of the same round), then its median.
//   paced       `--paced-events` at `--paced-rate`/s, each timed from send to receipt,
//               after each round's throughput runs, in the same order; p50 and p99 are
//               the medians over the rounds, the p99 ratio is taken per round.
//   CPU         per throughput round, CPU microseconds per event of the server (broker
//               or daemons), the publisher (this process) and the subscribers' processes,
//               and the cores they kept busy (cpu.mjs; Linux /proc).
// Native tools (mosquitto_pub/sub, redis-benchmark) are printed as ceilings: what each
// broker does with its own C clients. `uptime` load is printed before and after.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

import { cpuPerEvent, cpuSnapshot } from './cpu.mjs';
import { nativeCeilings } from './native.mjs';
import { makePayload } from './payload.mjs';
import { blast } from './publish.mjs';
import { SYSTEMS, startBrokers, startOverlay } from './systems.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const options = {
    rounds: 3, events: 50_000, events4k: 20_000, window: 512, sizes: [100, 4096],
    subs: [1, 10], daemons: [1, 10], systems: Object.keys(SYSTEMS), native: true,
    pacedEvents: 2000, pacedRate: 1000, warmup: 5000, topics: 3,
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = () => argv[++i];
    const list = () => value().split(',');
    if (flag === '--quick') {
      Object.assign(options, { rounds: 2, events: 20_000, events4k: 5000, pacedEvents: 500,
        warmup: 2000 });
    } else if (flag === '--rounds') options.rounds = Number(value());
    else if (flag === '--events') options.events = options.events4k = Number(value());
    else if (flag === '--window') options.window = Number(value());
    else if (flag === '--sizes') options.sizes = list().map(Number);
    else if (flag === '--subs') options.subs = list().map(Number);
    else if (flag === '--daemons') options.daemons = list().map(Number);
    else if (flag === '--systems') options.systems = list();
    else if (flag === '--no-native') options.native = false;
    else if (flag === '--paced-events') options.pacedEvents = Number(value());
    else if (flag === '--paced-rate') options.pacedRate = Number(value());
    else if (flag === '--topics') options.topics = Number(value());
    else throw new Error(`unknown flag ${flag}`);
  }
  return options;
}

const log = (text) => process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${text}\n`);
const load = () => os.loadavg().map((x) => x.toFixed(2)).join(' ');

/** One subscriber connection of one system, in a process of its own (subscriber.mjs). */
class SubscriberProcess {
  constructor(system, topic, targets) {
    this.child = spawn(process.execPath, [path.join(HERE, 'subscriber.mjs'), system, topic,
      ...targets.map(String)], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.replies = [];
    this.waiters = [];
    readline.createInterface({ input: this.child.stdout }).on('line', (line) => {
      const msg = JSON.parse(line);
      const waiter = this.waiters.shift();
      if (waiter) waiter(msg);
      else this.replies.push(msg);
    });
    this.exited = new Promise((resolve) => this.child.once('exit', resolve));
  }

  next(timeout) {
    if (this.replies.length) return Promise.resolve(this.replies.shift());
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('subscriber process did not answer')),
        timeout);
      this.waiters.push((msg) => { clearTimeout(timer); resolve(msg); });
    });
  }

  async expect(run, count, timeout) {
    this.child.stdin.write(`${JSON.stringify({ expect: run, count, timeout })}\n`);
    return this.next(timeout + 10_000);
  }

  async close() {
    if (this.child.exitCode === null) {
      this.child.stdin.write(`${JSON.stringify({ exit: true })}\n`);
    }
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    await this.exited;
    clearTimeout(timer);
  }
}

/** The subscribers of one system: one process each, their answers merged. */
class Subscribers {
  constructor(system, topic, targets) {
    this.processes = targets.map((target) => new SubscriberProcess(system, topic, [target]));
    children.push(...this.processes.map((p) => p.child));
  }

  async ready() {
    for (const subscriber of this.processes) {
      const msg = await subscriber.next(60_000);
      if (!msg.ready) throw new Error(`subscriber not ready: ${JSON.stringify(msg)}`);
    }
  }

  async expect(run, count, timeout) {
    const answers = await Promise.all(this.processes.map((p) => p.expect(run, count, timeout)));
    const samples = answers.flatMap((a) => a.latUs).sort((a, b) => a - b);
    const at = (q) => (samples.length ? samples[Math.min(samples.length - 1,
      Math.floor(q * samples.length))] : null);
    return {
      received: answers.flatMap((a) => a.received),
      lastNs: answers.map((a) => BigInt(a.lastNs)).reduce((a, b) => (a > b ? a : b)),
      latUs: { p50: at(0.5), p99: at(0.99) },
    };
  }

  async close() {
    await Promise.all(this.processes.map((p) => p.close()));
  }
}

/** Every child process and service started, for clean-up on SIGINT/SIGTERM. */
const children = [];
const cleanups = [];
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, async () => {
    log(`${signal}: stopping what the bench started`);
    for (const child of children) child.kill('SIGKILL');
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
    process.exit(130);
  });
}

/** `count` payloads at `rate` per second (all sends, no window: the rate is low). */
async function paced(publisher, count, rate, size, run) {
  const start = performance.now();
  const pending = [];
  for (let seq = 0; seq < count;) {
    const due = Math.min(count, Math.floor(((performance.now() - start) * rate) / 1000) + 1);
    while (seq < due) {
      const sent = publisher.send(makePayload(size, run, seq++));
      if (sent) pending.push(sent);
      if (publisher.flush) await publisher.flush();
    }
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  await Promise.all(pending);
}

let nextRun = 1;

async function probe(name, contender) {
  for (let attempt = 0; attempt < 20; attempt++) {
    const run = nextRun++;
    await blast(contender.publisher, 1, 1, 100, run);
    const got = await contender.subs.expect(run, 1, 1000);
    if (got.received.every((n) => n >= 1)) return;
  }
  throw new Error(`${name}: the subscribers never heard a probe`);
}

async function throughput(contender, count, window, size) {
  const run = nextRun++;
  const subscriberPids = contender.subs.processes.map((p) => p.child.pid);
  const before = cpuSnapshot(contender.serverPids, subscriberPids);
  const startNs = process.hrtime.bigint();
  await blast(contender.publisher, count, window, size, run);
  const got = await contender.subs.expect(run, count, 30_000);
  const cpu = cpuPerEvent(before, cpuSnapshot(contender.serverPids, subscriberPids), count);
  const least = Math.min(...got.received);
  const seconds = Number(got.lastNs - startNs) / 1e9;
  const rate = least / seconds;
  return { rate, mbps: (rate * size * got.received.length) / 1e6, lost: count - least,
    burstP50: got.latUs.p50, burstP99: got.latUs.p99, cpu };
}

async function latency(contender, count, rate, size) {
  const run = nextRun++;
  await paced(contender.publisher, count, rate, size, run);
  const got = await contender.subs.expect(run, count, 30_000);
  return { p50: got.latUs.p50, p99: got.latUs.p99, lost: count - Math.min(...got.received) };
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

const fmtRate = (x) => (x >= 1000 ? `${(x / 1000).toFixed(1)}k` : x.toFixed(0));
const fmtUs = (x) => (x === null || x === undefined ? '-'
  : x >= 1000 ? `${(x / 1000).toFixed(2)}ms` : `${x.toFixed(0)}us`);

/** Where `topic`'s tree lies among the daemons (`overlay tree`): its root, whose daemon
 * that is, and the depth of the deepest subscriber's daemon (the root's children: 1). */
async function placement(overlay, topic, subscriberApis) {
  const nodes = await overlay.tree(topic);
  const nameOf = (id) => overlay.names[overlay.ids.indexOf(id)] ?? id.slice(0, 8);
  const subscriberIds = subscriberApis.map((api) => overlay.ids[overlay.apis.indexOf(api)]);
  const roots = nodes.filter((node) => node.role === 'root');
  if (roots.length !== 1) return `${roots.length} roots`;
  const root = roots[0].node;
  const whose = root === overlay.ids[0] ? "publisher's"
    : subscriberIds.includes(root) ? "a subscriber's" : 'another';
  const depths = subscriberIds.map((id) => nodes.find((node) => node.node === id)?.depth ?? NaN);
  return `root ${nameOf(root)} (${whose} daemon), deepest subscriber's daemon at depth `
    + `${Math.max(...depths)} (the root: 0)`;
}

/** One setup (daemons), one subscriber count, one topic: every system, every size. */
async function scenario(setup, nsubs, overlay, brokers, options, results, topicNo) {
  const topic = `bench-${process.pid}-${setup.replace(' ', '')}-${nsubs}-t${topicNo}`;
  const contenders = {};
  let where = null;
  try {
    for (const name of options.systems) {
      const system = SYSTEMS[name];
      let publishTo;
      let targets;
      let serverPids;
      if (system.kind === 'overlay') {
        publishTo = overlay.apis[0];
        serverPids = overlay.pids;
        targets = overlay.apis.length === 1 ? Array(nsubs).fill(overlay.apis[0])
          : Array.from({ length: nsubs }, (_, i) => overlay.apis[1 + (i % (overlay.apis.length - 1))]);
      } else {
        if (!brokers[system.kind]) continue;
        publishTo = brokers[system.kind].port;
        serverPids = [brokers[system.kind].pid];
        targets = Array(nsubs).fill(brokers[system.kind].port);
      }
      const subs = new Subscribers(name, topic, targets);
      const adapter = await system.make();
      contenders[name] = { subs, serverPids,
        publisher: await adapter.publisher(publishTo, topic) };
      await subs.ready();
      await probe(name, contenders[name]);
      if (system.kind === 'overlay' && overlay.apis.length > 1 && where === null) {
        where = await placement(overlay, topic, [...new Set(targets)]);
      }
    }
    const names = Object.keys(contenders);
    log(`${setup}, ${nsubs} subscriber(s)${where ? `, topic ${topicNo + 1}: ${where}` : ''}: `
      + `${names.join(', ')} subscribed; load ${load()}`);
    for (const size of options.sizes) {
      // Fewer events with more subscribers: about the same deliveries per run.
      const count = Math.max(2000, Math.round((size > 1000 ? options.events4k : options.events)
        / Math.sqrt(nsubs)));
      for (const name of names) {
        await throughput(contenders[name], Math.min(count, options.warmup), options.window, size);
      }
      for (let round = 0; round < options.rounds; round++) {
        const order = names.map((_, i) => names[(i + round) % names.length]);
        for (const name of order) {
          const result = await throughput(contenders[name], count, options.window, size);
          results.push({ kind: 'throughput', setup, nsubs, size, name, round, topicNo, where,
            load: os.loadavg()[0], ...result });
          log(`  ${size} B round ${round + 1} ${name}: ${fmtRate(result.rate)}/s`
            + `${result.lost ? ` (LOST ${result.lost})` : ''}`);
        }
        // Paced latency per round too, in the same order: its ratios are taken per round
        // like the throughput's, so that load moving on the machine falls on all alike.
        for (const name of order) {
          const result = await latency(contenders[name], options.pacedEvents, options.pacedRate,
            size);
          results.push({ kind: 'paced', setup, nsubs, size, name, round, topicNo, where,
            load: os.loadavg()[0], ...result });
        }
      }
    }
  } finally {
    for (const contender of Object.values(contenders)) {
      await contender.publisher.close();
      await contender.subs.close();
    }
  }
}

const PAIRS = [
  ['overlay unreliable', 'mosquitto QoS0'],
  ['overlay reliable', 'mosquitto QoS1'],
  ['overlay unreliable', 'redis pub/sub'],
  ['overlay unreliable', 'nats core'],
];

/** Per pair of PAIRS both in `rows`: the overlay / broker ratio of each round (the two
 * runs of a round are neighbours in time), with the load of each. */
function pairRatios(rows, kind = 'throughput', value = (r) => r.rate) {
  const pairs = [];
  for (const [a, b] of PAIRS) {
    const ra = rows.filter((r) => r.name === a && r.kind === kind);
    const rb = rows.filter((r) => r.name === b && r.kind === kind);
    if (!ra.length || !rb.length) continue;
    const ratios = ra.map((r) => value(r) / value(rb.find((x) => x.round === r.round
      && x.topicNo === r.topicNo)));
    pairs.push({ a, b, ratios, loads: ra.map((r) => r.load) });
  }
  return pairs;
}

/** Who did the work of the throughput rounds: CPU microseconds per event of the server
 * (a broker; or the daemons together, and the busiest one alone), the publisher and the
 * subscribers together, medians over the rounds; and how many cores all of them kept
 * busy. A system whose server is not near one core busy, on a machine whose cores are
 * not all busy, was held back by something else (a client, the window). */
function cpuTable(rows, names) {
  const runs = (name) => rows.filter((r) => r.name === name && r.kind === 'throughput'
    && r.cpu?.cores != null);
  if (!names.some((name) => runs(name).length)) return;
  const us = (x) => (x == null ? '-' : x.toFixed(1));
  console.log('CPU us/event         server (busiest)     publisher  subscribers  cores busy');
  for (const name of names) {
    const cpus = runs(name).map((r) => r.cpu);
    if (!cpus.length) continue;
    const at = (key) => median(cpus.map((c) => c[key]));
    const busiest = cpus[0].busiestServer == null ? '' : ` (${us(at('busiestServer'))})`;
    console.log(`${name.padEnd(20)} ${`${us(at('server'))}${busiest}`.padEnd(20)} `
      + `${us(at('publisher')).padStart(9)}  ${us(at('subscribers')).padStart(11)}  `
      + `${at('cores').toFixed(2).padStart(10)}`);
  }
}

function report(results, options) {
  const groups = new Map();
  for (const r of results) {
    const key = `${r.setup}|${r.nsubs}|${r.size}|${r.topicNo}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(r);
  }
  for (const [key, rows] of groups) {
    const [setup, nsubs, size] = key.split('|');
    const where = rows[0].where ? `, topic ${rows[0].topicNo + 1}: ${rows[0].where}` : '';
    console.log(`\n## ${setup}, ${nsubs} subscriber(s), ${size} B payload, window ${options.window}`
      + where);
    console.log('system               events/s (min-max)          MB/s    burst p50/p99       paced p50/p99');
    const names = [...new Set(rows.map((r) => r.name))];
    for (const name of names) {
      const runs = rows.filter((r) => r.name === name && r.kind === 'throughput');
      const paces = rows.filter((r) => r.name === name && r.kind === 'paced');
      const pace = paces.length ? { p50: median(paces.map((r) => r.p50)),
        p99: median(paces.map((r) => r.p99)),
        lost: paces.reduce((sum, r) => sum + r.lost, 0) } : null;
      const rates = runs.map((r) => r.rate);
      const lost = runs.reduce((sum, r) => sum + r.lost, 0) + (pace?.lost ?? 0);
      console.log(`${name.padEnd(20)} ${fmtRate(median(rates)).padStart(7)} `
        + `(${fmtRate(Math.min(...rates))}-${fmtRate(Math.max(...rates))})`.padEnd(20)
        + `${median(runs.map((r) => r.mbps)).toFixed(1).padStart(7)}   `
        + `${fmtUs(median(runs.map((r) => r.burstP50)))}/${fmtUs(median(runs.map((r) => r.burstP99)))}`.padEnd(20)
        + `${fmtUs(pace?.p50)}/${fmtUs(pace?.p99)}${lost ? `  LOST ${lost}` : ''}`);
    }
    cpuTable(rows, names);
    const paced = pairRatios(rows, 'paced', (r) => r.p99);
    for (const { a, b, ratios, loads } of pairRatios(rows)) {
      const p99 = paced.find((p) => p.a === a && p.b === b)?.ratios ?? [];
      console.log(`  ${a} / ${b}: throughput per round ${ratios.map((x) => x.toFixed(2)).join(' ')}`
        + ` -> median ${median(ratios).toFixed(2)}x; paced p99 per round `
        + `${p99.map((x) => x.toFixed(2)).join(' ')} -> median ${median(p99).toFixed(2)}x`
        + ` (load ${loads.map((x) => x.toFixed(1)).join(' ')})`);
    }
  }
  // A setup run with several topics: the ratios of all their rounds together, so that
  // no one topic's tree decides the figure.
  const setups = new Map();
  for (const r of results) {
    const key = `${r.setup}|${r.nsubs}|${r.size}`;
    if (!setups.has(key)) setups.set(key, []);
    setups.get(key).push(r);
  }
  for (const [key, rows] of setups) {
    const topics = new Set(rows.map((r) => r.topicNo));
    if (topics.size < 2) continue;
    const [setup, nsubs, size] = key.split('|');
    console.log(`\n## ${setup}, ${nsubs} subscriber(s), ${size} B payload: ${topics.size} topics`);
    for (const { a, b, ratios } of pairRatios(rows)) {
      const perTopic = [...topics].map((t) => median(pairRatios(rows.filter((r) => r.topicNo === t))
        .find((p) => p.a === a && p.b === b).ratios).toFixed(2));
      console.log(`  ${a} / ${b}: median of ${ratios.length} rounds ${median(ratios).toFixed(2)}x`
        + ` (min ${Math.min(...ratios).toFixed(2)}, max ${Math.max(...ratios).toFixed(2)};`
        + ` per topic ${perTopic.join(' ')})`);
    }
  }
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  console.log(`# bench/throughput: ${os.cpus().length} CPUs, node ${process.version}, `
    + `load average at start ${load()}`);
  const work = await mkdtemp(path.join(os.tmpdir(), 'bench-throughput-'));
  const results = [];
  const brokers = await startBrokers(work, log);
  for (const broker of Object.values(brokers)) cleanups.push(broker.stop);
  try {
    if (options.native) {
      console.log('\n## Native clients (ceilings: each broker with its own C tools)');
      for (const line of await nativeCeilings(brokers, options, log)) console.log(line);
    }
    for (const daemons of options.daemons) {
      const setup = `${daemons} daemon${daemons > 1 ? 's' : ''}`;
      log(`${setup}: starting`);
      const overlay = await startOverlay(path.join(work, `cluster-${daemons}`), daemons);
      cleanups.push(overlay.stop);
      try {
        for (const nsubs of options.subs) {
          for (let topicNo = 0; topicNo < (daemons > 1 ? options.topics : 1); topicNo++) {
            await scenario(setup, nsubs, overlay, brokers, options, results, topicNo);
          }
        }
      } finally {
        await overlay.stop();
      }
    }
  } finally {
    for (const broker of Object.values(brokers)) await broker.stop();
    await rm(work, { recursive: true, force: true });
  }
  report(results, options);
  console.log(`\nload average at the end ${load()}`);
}

await main();
process.exit(0);
