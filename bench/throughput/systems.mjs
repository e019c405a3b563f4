// The systems under test, each behind one small adapter so that one harness drives them
// all from Node.js: the overlay (clients/js), Mosquitto (npm mqtt, QoS 0 and 1), Redis
// pub/sub (npm redis), NATS core (npm nats). Brokers come from Debian's packages and are
// started here on free loopback ports; a missing one is skipped with a message.
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const OVERLAY_BIN = process.env.OVERLAY_BIN ?? path.join(REPO, '.venv', 'bin', 'overlay');

/** An executable on PATH or in the sbin directories Debian puts daemons in. */
export function which(name) {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/bin', '/sbin']) {
    const candidate = path.join(dir, name);
    if (dir && existsSync(candidate)) return candidate;
  }
  return null;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

async function waitPort(port, child, what, timeout = 15_000) {
  const deadline = Date.now() + timeout;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${what} exited with ${child.exitCode}`);
    const ok = await new Promise((resolve) => {
      const probe = net.createConnection({ port, host: '127.0.0.1' });
      probe.once('connect', () => { probe.destroy(); resolve(true); });
      probe.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`${what} did not listen on port ${port} within ${timeout / 1000} s`);
}

/**
 * A broker process on a free loopback port; stopped by `stop()`. `envFor(port)`: its
 * environment; `group`: started in a process group of its own and stopped as a group
 * (a wrapper script's children too, e.g. rabbitmq-server's Erlang VM); `timeout`: ms to
 * wait for its port.
 */
export async function startProcess(what, exe, argsFor, work,
  { envFor = null, group = false, timeout = 15_000 } = {}) {
  const port = await freePort();
  const env = envFor ? await envFor(port) : process.env;
  const child = spawn(exe, await argsFor(port), { stdio: 'ignore', cwd: work, env,
    detached: group });
  const signal = (name) => {
    try {
      if (group) process.kill(-child.pid, name);
      else child.kill(name);
    } catch { /* gone already */ }
  };
  await waitPort(port, child, what, timeout);
  return {
    port,
    pid: child.pid,
    stop: () => new Promise((resolve) => {
      if (child.exitCode !== null) { if (group) signal('SIGKILL'); resolve(); return; }
      const timer = setTimeout(() => signal('SIGKILL'), 15_000);
      child.once('exit', () => {
        clearTimeout(timer);
        if (group) signal('SIGKILL');  // what the wrapper left behind
        resolve();
      });
      signal('SIGTERM');
    }),
  };
}

/** Start every broker that is installed; returns name -> {port, stop}. */
export async function startBrokers(work, log) {
  const brokers = {};
  const wanted = {
    mosquitto: ['mosquitto', async (port) => {
      const conf = path.join(work, 'mosquitto.conf');
      await writeFile(conf, `listener ${port} 127.0.0.1\nallow_anonymous true\n`
        + 'max_queued_messages 0\nmax_inflight_messages 0\n');
      return ['-c', conf];
    }],
    redis: ['redis-server', (port) => ['--port', String(port), '--bind', '127.0.0.1',
      '--save', '', '--appendonly', 'no', '--dir', work]],
    nats: ['nats-server', (port) => ['-a', '127.0.0.1', '-p', String(port)]],
  };
  for (const [name, [exe, argsFor]] of Object.entries(wanted)) {
    const found = which(exe);
    if (!found) {
      log(`${exe} is not installed: ${name} skipped (bench/throughput/setup.sh installs it)`);
      continue;
    }
    brokers[name] = await startProcess(name, found, argsFor, work);
  }
  return brokers;
}

/** `overlay cluster up` of `nodes` daemons (`protocol`: TOML appended to each daemon's
 * configuration); returns their API sockets and a stop. */
export async function startOverlay(dir, nodes, protocol = null) {
  const extra = [];
  if (protocol !== null) {
    const file = `${dir}.protocol.toml`;
    await writeFile(file, protocol);
    extra.push('--protocol-file', file);
  }
  await promisify(execFile)(OVERLAY_BIN, ['cluster', 'up', '--dir', dir, '--nodes',
    String(nodes), '--timeout', '180', ...extra], { maxBuffer: 1 << 20 });
  const inventory = JSON.parse(await readFile(path.join(dir, 'cluster.json'), 'utf8'));
  return {
    apis: inventory.nodes.map((node) => node.api),
    pids: inventory.nodes.map((node) => node.pid),
    names: inventory.nodes.map((node) => node.name),
    ids: inventory.nodes.map((node) => node.node),
    /** `overlay tree TOPIC --json`, asked of the first daemon: one entry per tree node. */
    tree: async (topic) => {
      const { stdout } = await promisify(execFile)(OVERLAY_BIN, ['tree', topic, '--json',
        '--api', inventory.nodes[0].api], { maxBuffer: 1 << 20 });
      return stdout.trim().split('\n').map((line) => JSON.parse(line));
    },
    stop: () => promisify(execFile)(OVERLAY_BIN, ['cluster', 'down', '--dir', dir]),
  };
}

// -- adapters: publisher and subscriber connections ------------------------------------
//
// publisher(target) -> {send(payload) -> Promise | undefined, flush?(), close()}
//   send's promise settles when the system acknowledged the event (overlay reply, MQTT
//   PUBACK or write for QoS 0, Redis reply); the harness keeps `window` of them open.
// subscriber(target, topic, onMessage(payload)) -> {close()}

export const ADAPTERS = {
  async overlay(reliable) {
    const { connect } = await import('@overlay/client');
    return {
      async publisher(target, topic) {
        const client = await connect(target, { clientName: 'bench-pub' });
        return {
          send: (payload) => client.publish(topic, { payload, reliable }),
          close: () => client.close(),
        };
      },
      async subscriber(target, topic, onMessage) {
        const client = await connect(target, { clientName: 'bench-sub' });
        await client.subscribe(topic, { onEvent: (event) => onMessage(event.payload) });
        return { close: () => client.close() };
      },
    };
  },

  async mqtt(qos) {
    const mqtt = (await import('mqtt')).default;
    const open = (port) => mqtt.connectAsync(`mqtt://127.0.0.1:${port}`,
      { protocolVersion: 4, reconnectPeriod: 0, clean: true });
    return {
      async publisher(port, topic) {
        const client = await open(port);
        return {
          send: (payload) => new Promise((resolve, reject) => {
            client.publish(topic, payload, { qos }, (error) => (error ? reject(error) : resolve()));
          }),
          close: () => client.end(true),
        };
      },
      async subscriber(port, topic, onMessage) {
        const client = await open(port);
        client.on('message', (_topic, payload) => onMessage(payload));
        await client.subscribeAsync(topic, { qos });
        return { close: () => client.end(true) };
      },
    };
  },

  async redis() {
    const { createClient } = await import('redis');
    const open = async (port) => {
      const client = createClient({ url: `redis://127.0.0.1:${port}` });
      await client.connect();
      return client;
    };
    return {
      async publisher(port, topic) {
        const client = await open(port);
        const channel = Buffer.from(topic);
        return {
          send: (payload) => client.publish(channel, payload),
          close: () => client.destroy(),
        };
      },
      async subscriber(port, topic, onMessage) {
        const client = await open(port);
        await client.subscribe(topic, (message) => onMessage(message), true);
        return { close: () => client.destroy() };
      },
    };
  },

  async nats() {
    const { connect } = await import('nats');
    const open = (port) => connect({ servers: `127.0.0.1:${port}` });
    return {
      async publisher(port, topic) {
        const client = await open(port);
        return {
          // NATS core has no acknowledgement: publish() only buffers. The harness's
          // window is kept by a flush (one round trip) every `window` events instead.
          send: (payload) => { client.publish(topic, payload); },
          flush: () => client.flush(),
          close: () => client.close(),
        };
      },
      async subscriber(port, topic, onMessage) {
        const client = await open(port);
        client.subscribe(topic, { callback: (_error, msg) => onMessage(msg.data) });
        await client.flush();  // the subscription is known to the server from here on
        return { close: () => client.close() };
      },
    };
  },
};

/** The systems compared: label -> how to make its adapter and which target it uses. */
export const SYSTEMS = {
  'overlay unreliable': { kind: 'overlay', make: () => ADAPTERS.overlay(false) },
  'overlay reliable': { kind: 'overlay', make: () => ADAPTERS.overlay(true) },
  'mosquitto QoS0': { kind: 'mosquitto', make: () => ADAPTERS.mqtt(0) },
  'mosquitto QoS1': { kind: 'mosquitto', make: () => ADAPTERS.mqtt(1) },
  'redis pub/sub': { kind: 'redis', make: () => ADAPTERS.redis() },
  'nats core': { kind: 'nats', make: () => ADAPTERS.nats() },
};
