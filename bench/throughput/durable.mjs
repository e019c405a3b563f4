// Durable, acknowledged publishing: the overlay's topic logs against NATS JetStream (file
// storage) and RabbitMQ (durable queue, persistent messages, publisher confirms), every
// system driven from Node.js by the same publisher loop (a window of unacknowledged
// publishes), the same 100-byte payloads, no subscriber: the rate at which the system
// acknowledges events it holds on disk.
//
//   node bench/throughput/durable.mjs [--events 20000] [--window 256] [--rounds 3]
//        [--size 100] [--daemons 1,4] [--systems a,b]
//
// Overlay setups: `[storage] sync = "always"` (group commit), `"interval:10"`, and no
// storage (in memory: acknowledged once the root and its replicas hold the event in
// memory), each on 1 daemon and on 4 (replicas 2: the publisher's events are copied to two
// successors of the topic's root, which sync before they confirm). For each storage
// setup: syncs (commits) per second and persisted operations per sync, from the daemons'
// status. JetStream with its default sync (every 2 minutes: acknowledged before it is on
// disk) and with `sync_interval: always`; RabbitMQ as Debian ships it (fsync per batch of
// confirms). Brokers missing from the machine are skipped with a message
// (bench/throughput/setup.sh installs them).
//
// Rounds run every system once, in a rotated order (A B C, B C A, ...); ratios are taken
// within a round (durable overlay / in-memory overlay, overlay / broker), then their
// median, so that load moving on the machine falls on all alike.
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

import { blast } from './publish.mjs';
import { jetstreamSystem, rabbitSystem } from './brokers.mjs';
import { ADAPTERS, OVERLAY_BIN } from './systems.mjs';

const run = promisify(execFile);

function parseArgs(argv) {
  const options = { events: 20000, window: 256, rounds: 3, size: 100, daemons: [1, 4],
    systems: null };
  for (let i = 0; i < argv.length; i++) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (flag === '--events') options.events = Number(value);
    else if (flag === '--window') options.window = Number(value);
    else if (flag === '--rounds') options.rounds = Number(value);
    else if (flag === '--size') options.size = Number(value);
    else if (flag === '--daemons') options.daemons = value.split(',').map(Number);
    else if (flag === '--systems') options.systems = value.split(',');
    else throw new Error(`unknown option ${flag}`);
    i++;
  }
  return options;
}

// -- systems --------------------------------------------------------------------------------

async function overlaySystem(work, nodes, storage) {
  const dir = path.join(work, `overlay-${nodes}-${storage}`);
  await mkdir(dir, { recursive: true });
  const extra = path.join(dir, 'extra.toml');
  await writeFile(extra, storage === 'memory' ? '[storage]\nenabled = false\n'
    : `[storage]\nsync = "${storage}"\n`);
  await run(OVERLAY_BIN, ['cluster', 'up', '--dir', dir, '--nodes', String(nodes),
    '--protocol-file', extra, '--timeout', '180'], { maxBuffer: 1 << 20 });
  const inventory = JSON.parse(await readFile(path.join(dir, 'cluster.json'), 'utf8'));
  const apis = inventory.nodes.map((node) => node.api);
  const adapter = await ADAPTERS.overlay(true);
  return {
    target: apis[0],
    async publisher(topic) { return adapter.publisher(apis[0], topic); },
    async storageStats() {
      let commits = 0;
      let submitted = 0;
      for (const api of apis) {
        const { stdout } = await run(OVERLAY_BIN, ['status', '--json', '--api', api]);
        const storageStatus = JSON.parse(stdout).storage;
        if (storageStatus) { commits += storageStatus.commits; submitted += storageStatus.submitted; }
      }
      return { commits, submitted };
    },
    stop: () => run(OVERLAY_BIN, ['cluster', 'down', '--dir', dir]),
  };
}

// -- measuring ------------------------------------------------------------------------------

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

const fmt = (n, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d,
  minimumFractionDigits: d });

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const work = await mkdtemp(path.join(os.tmpdir(), 'overlay-durable-'));
  const { stdout: load } = await run('uptime');
  console.log(`load before: ${load.trim()}`);
  console.log(`events ${options.events} x ${options.size} B, window ${options.window}, `
    + `rounds ${options.rounds}; work dir ${work}`);
  const makers = {};
  for (const nodes of options.daemons) {
    for (const storage of ['always', 'interval:10', 'memory']) {
      makers[`overlay ${nodes}d ${storage}`] = () => overlaySystem(work, nodes, storage);
    }
  }
  makers['jetstream default sync'] = () => jetstreamSystem(work, false);
  makers['jetstream sync always'] = () => jetstreamSystem(work, true);
  makers.rabbitmq = () => rabbitSystem(work);
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
    const rates = Object.fromEntries(Object.keys(systems).map((n) => [n, []]));
    const stats = Object.fromEntries(Object.keys(systems).map((n) => [n, []]));
    const order = Object.keys(systems);
    for (let round = 0; round < options.rounds; round++) {
      const rotated = [...order.slice(round % order.length), ...order.slice(0, round % order.length)];
      for (const name of rotated) {
        const system = systems[name];
        const publisher = await system.publisher(`durable${round}`);
        const before = system.storageStats ? await system.storageStats() : null;
        const t0 = performance.now();
        await blast(publisher, options.events, options.window, options.size, round + 1);
        const seconds = (performance.now() - t0) / 1000;
        const rate = options.events / seconds;
        await publisher.close();
        rates[name].push(rate);
        if (before) {
          const after = await system.storageStats();
          const commits = after.commits - before.commits;
          stats[name].push({ syncsPerSecond: commits / seconds,
            opsPerSync: commits ? (after.submitted - before.submitted) / commits : 0 });
        }
        console.log(`round ${round + 1} ${name}: ${fmt(rate)} events/s`);
      }
    }
    console.log('\nsystem                      events/s median  rounds                 syncs/s  ops/sync');
    for (const name of order) {
      const s = stats[name];
      const syncs = s.length ? fmt(median(s.map((x) => x.syncsPerSecond))) : '-';
      const per = s.length ? fmt(median(s.map((x) => x.opsPerSync)), 1) : '-';
      console.log(`${name.padEnd(28)}${fmt(median(rates[name])).padStart(15)}  `
        + `${rates[name].map((r) => fmt(r)).join(' / ').padEnd(22)} ${syncs.padStart(7)}  ${per.padStart(8)}`);
    }
    console.log('\nratios within each round, then the median (> 1: the first is faster)');
    const pairs = [];
    for (const nodes of options.daemons) {
      for (const durable of ['always', 'interval:10']) {
        pairs.push([`overlay ${nodes}d ${durable}`, `overlay ${nodes}d memory`]);
      }
    }
    for (const broker of ['jetstream default sync', 'jetstream sync always', 'rabbitmq']) {
      pairs.push([`overlay ${options.daemons[0]}d always`, broker]);
    }
    for (const [a, b] of pairs) {
      if (!rates[a] || !rates[b]) continue;
      const per = rates[a].map((r, i) => r / rates[b][i]);
      console.log(`${a} / ${b}: ${fmt(median(per), 2)} (rounds: ${per.map((r) => fmt(r, 2)).join(', ')})`);
    }
  } finally {
    for (const system of Object.values(systems)) await system.stop();
    const { stdout: after } = await run('uptime');
    console.log(`load after: ${after.trim()}`);
    await rm(work, { recursive: true, force: true });
  }
}

await main();
