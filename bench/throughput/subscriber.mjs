// Subscribers of one system, in their own process (so that their work is not the
// publisher's): `node subscriber.mjs SYSTEM TOPIC TARGET...`, one connection per target
// (run.mjs starts one process per subscriber: one Node thread would otherwise cap the
// fan-out of every system alike).
// Each payload starts with the send time (process.hrtime in ns, CLOCK_MONOTONIC, the same
// clock in every process), a run number and a sequence number (payload.mjs).
//
// Commands on stdin, one JSON object a line:
//   {"expect": RUN, "count": N, "timeout": MS}  answer once every subscriber got N events
//       of run RUN (or the timeout passed): {"run", "received": [per subscriber],
//       "firstNs", "lastNs" (receipt times), "latUs": up to 4000 latencies in
//       microseconds, sorted (every k-th of them: the parent merges processes' samples)}
//   {"exit": true}
// Writes {"ready": true} once every subscription is in effect.
import readline from 'node:readline';

import { readStamp } from './payload.mjs';
import { SYSTEMS } from './systems.mjs';

const [systemName, topic, ...targets] = process.argv.slice(2);
const adapter = await SYSTEMS[systemName].make();

/** run -> {received: per subscriber, first, last, latencies} */
const runs = new Map();
const waiting = new Map();

function runOf(run) {
  let entry = runs.get(run);
  if (entry === undefined) {
    entry = { received: targets.map(() => 0), first: 0n, last: 0n, latencies: [] };
    runs.set(run, entry);
  }
  return entry;
}

const connections = [];
for (let i = 0; i < targets.length; i++) {
  const target = /^\d+$/.test(targets[i]) ? Number(targets[i]) : targets[i];
  connections.push(await adapter.subscriber(target, topic, (payload) => {
    const now = process.hrtime.bigint();
    const { sentNs, run } = readStamp(payload);
    const entry = runOf(run);
    entry.received[i]++;
    if (entry.first === 0n) entry.first = now;
    entry.last = now;
    entry.latencies.push(Number(now - sentNs) / 1000);
    const wait = waiting.get(run);
    if (wait && entry.received.every((n) => n >= wait.count)) answer(run);
  }));
}
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);

const MAX_SAMPLES = 4000;

function answer(run) {
  const wait = waiting.get(run);
  if (!wait) return;
  waiting.delete(run);
  clearTimeout(wait.timer);
  const entry = runOf(run);
  const sorted = Float64Array.from(entry.latencies).sort();
  const stride = Math.max(1, Math.ceil(sorted.length / MAX_SAMPLES));
  const samples = [];
  for (let i = 0; i < sorted.length; i += stride) samples.push(Math.round(sorted[i]));
  process.stdout.write(`${JSON.stringify({
    run, received: entry.received, firstNs: String(entry.first), lastNs: String(entry.last),
    latUs: samples,
  })}\n`);
  runs.delete(run);
}

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  const command = JSON.parse(line);
  if (command.exit) break;
  const run = command.expect;
  waiting.set(run, { count: command.count,
    timer: setTimeout(() => answer(run), command.timeout) });
  const entry = runOf(run);
  if (entry.received.every((n) => n >= command.count)) answer(run);
}
for (const connection of connections) await connection.close();
process.exit(0);
