// Ceilings: each broker driven by its own C tools, one subscriber, 100-byte messages.
//   Mosquitto  mosquitto_sub -C N (exits after N messages) while mosquitto_pub --repeat N
//              publishes: events/s = N / (subscriber's exit - publisher's start).
//   Redis      redis-benchmark PUBLISH, pipelined 64 deep, with one redis-cli subscriber.
//   NATS       `nats bench` is not in Debian's packages: said so.
import { spawn } from 'node:child_process';

import { which } from './systems.mjs';

function run(exe, args, { stdout = 'ignore' } = {}) {
  const child = spawn(exe, args, { stdio: ['ignore', stdout, 'ignore'] });
  let out = '';
  child.stdout?.on('data', (chunk) => { out += chunk; });
  const done = new Promise((resolve) => child.once('exit', (code) => resolve({ code, out })));
  return { child, done };
}

function within(promise, ms, child) {
  let timer;
  return Promise.race([promise, new Promise((resolve) => {
    timer = setTimeout(() => { child.kill('SIGKILL'); resolve({ code: 'timeout' }); }, ms);
  })]).finally(() => clearTimeout(timer));
}

async function mosquittoNative(port, qos, count) {
  const topic = `native-${qos}`;
  const sub = run(which('mosquitto_sub'), ['-h', '127.0.0.1', '-p', String(port), '-t', topic,
    '-q', String(qos), '-C', String(count)]);
  // Wait until the subscription exists: the broker keeps no message for a topic nobody
  // subscribed to yet. A retained-free probe: publish until the subscriber counted one.
  await new Promise((resolve) => setTimeout(resolve, 500));
  const started = process.hrtime.bigint();
  const pub = run(which('mosquitto_pub'), ['-h', '127.0.0.1', '-p', String(port), '-t', topic,
    '-q', String(qos), '-m', 'x'.repeat(100), '--repeat', String(count), '--repeat-delay', '0']);
  const result = await within(sub.done, 60_000, sub.child);
  pub.child.kill('SIGKILL');
  if (result.code !== 0) return `mosquitto_pub/sub QoS ${qos}: subscriber did not get ${count} (${result.code})`;
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return `mosquitto_pub/sub QoS ${qos}, 100 B, 1 subscriber: ${(count / seconds / 1000).toFixed(1)}k events/s`;
}

async function redisNative(port, count) {
  const sub = run(which('redis-cli'), ['-p', String(port), 'subscribe', 'native']);
  await new Promise((resolve) => setTimeout(resolve, 300));
  const bench = run(which('redis-benchmark'), ['-p', String(port), '-n', String(count), '-P', '64',
    '-q', 'PUBLISH', 'native', 'x'.repeat(100)], { stdout: 'pipe' });
  const result = await within(bench.done, 60_000, bench.child);
  sub.child.kill('SIGKILL');
  const rate = /([\d.]+) requests per second/.exec(result.out ?? '');
  return `redis-benchmark PUBLISH -P 64, 100 B, 1 redis-cli subscriber: `
    + `${rate ? `${(Number(rate[1]) / 1000).toFixed(1)}k publishes/s` : 'no figure'}`;
}

export async function nativeCeilings(brokers, options, log) {
  const lines = [];
  const count = 200_000;
  if (brokers.mosquitto && which('mosquitto_pub') && which('mosquitto_sub')) {
    for (const qos of [0, 1]) {
      log(`native: mosquitto QoS ${qos}`);
      lines.push(await mosquittoNative(brokers.mosquitto.port, qos, qos ? count / 4 : count));
    }
  } else {
    lines.push('mosquitto_pub/sub: not installed (apt-get install mosquitto-clients)');
  }
  if (brokers.redis && which('redis-benchmark') && which('redis-cli')) {
    log('native: redis-benchmark');
    lines.push(await redisNative(brokers.redis.port, count));
  } else {
    lines.push('redis-benchmark: not installed (apt-get install redis-tools)');
  }
  lines.push('nats bench: not in Debian\'s packages (the natscli tool); no native NATS ceiling');
  return lines;
}
