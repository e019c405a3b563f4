// Real daemons for the tests, each in its own state directory, stopped after the test:
// `python -m overlay.cli daemon` with PYTHONPATH = this checkout, so that the daemons run
// this checkout's code (or $OVERLAY_BIN, run as it is). The python is the checkout's
// `.venv/bin/python` (a clean clone: scripts/setup.sh made it), else, in a git worktree
// without a .venv of its own, the main checkout's (whose editable install points at the
// main checkout: PYTHONPATH puts this one first); $OVERLAY_PYTHON overrides both.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import net from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { FrameReader, cbor } from '../src/frames.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
export const OVERLAY_BIN = process.env.OVERLAY_BIN;
export const PYTHON = process.env.OVERLAY_PYTHON ?? venvPython(REPO);

/** The .venv python of `repo`, or of the main checkout when `repo` is a git worktree. */
function venvPython(repo) {
  const own = path.join(repo, '.venv', 'bin', 'python');
  if (existsSync(own)) return own;
  const dotGit = path.join(repo, '.git');
  if (existsSync(dotGit) && statSync(dotGit).isFile()) {
    // A worktree's .git file says `gitdir: <main>/.git/worktrees/<name>`, whose
    // `commondir` leads to <main>/.git.
    const gitdir = path.resolve(repo,
      readFileSync(dotGit, 'utf8').match(/^gitdir:\s*(.+)$/m)?.[1].trim() ?? '');
    const commondir = path.join(gitdir, 'commondir');
    if (existsSync(commondir)) {
      const main = path.dirname(path.resolve(gitdir, readFileSync(commondir, 'utf8').trim()));
      const shared = path.join(main, '.venv', 'bin', 'python');
      if (existsSync(shared)) return shared;
    }
  }
  return own;  // missing: the spawn fails and says where it looked
}

/** The command and environment that start `overlay daemon ...args`. */
function daemonCommand(args) {
  if (OVERLAY_BIN) return { file: OVERLAY_BIN, args, env: process.env };
  const pythonPath = [REPO, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter);
  return { file: PYTHON, args: ['-m', 'overlay.cli', ...args],
    env: { ...process.env, PYTHONPATH: pythonPath } };
}

/**
 * Start one daemon (a ring of its own) and wait for its ready line.
 * @param {{config?: string, timeout?: number}} [options] config: TOML text
 * @returns {Promise<{api: string, dir: string, node: string, stop: () => Promise<void>}>}
 */
export async function startDaemon({ config, timeout = 30_000 } = {}) {
  const dir = await mkdtemp(path.join(tmpdir(), 'overlay-js-'));
  const args = ['daemon', '--bind', '127.0.0.1:0', '--state-dir', dir];
  if (config !== undefined) {
    await writeFile(path.join(dir, 'overlay.toml'), config);
    args.push('--config', path.join(dir, 'overlay.toml'));
  }
  const command = daemonCommand(args);
  const child = spawn(command.file, command.args,
    { stdio: ['ignore', 'pipe', 'pipe'], env: command.env });
  let stderr = '';
  child.stderr.on('data', (chunk) => { stderr = (stderr + chunk).slice(-4000); });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const ready = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => fail(new Error(`daemon not ready within ${timeout} ms`)),
      timeout);
    const fail = (error) => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(new Error(`${error.message}\n${stderr}`));
    };
    child.once('error', fail);
    const early = (code) => fail(new Error(`daemon exited with ${code}`));
    child.once('exit', early);
    child.stdout.on('data', (chunk) => {
      out += chunk;
      for (const line of out.split('\n')) {
        if (line.includes('"ready"')) {
          clearTimeout(timer);
          child.off('exit', early);
          resolve(JSON.parse(line));
          return;
        }
      }
    });
  });
  // The ready line may come just before the API socket listens: wait until it accepts.
  await waitFor(() => accepts(ready.api), `the API socket ${ready.api}`, timeout);
  const stop = async () => {
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(timer);
    await rm(dir, { recursive: true, force: true });
  };
  return { api: ready.api, dir, node: ready.node, stop };
}

function accepts(socketPath) {
  return new Promise((resolve) => {
    const probe = net.createConnection({ path: socketPath });
    probe.once('connect', () => { probe.destroy(); resolve(true); });
    probe.once('error', () => resolve(false));
  });
}

/** Resolve once `check()` is true; reject past `timeout` ms, naming `what`. */
export async function waitFor(check, what, timeout = 10_000) {
  const deadline = Date.now() + timeout;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** The next event of a subscription, or a rejection past `timeout` ms. */
export function nextWithin(subscription, timeout = 10_000) {
  return within(subscription.next(), 'event', timeout);
}

/** `promise`, or a rejection past `timeout` ms, naming `what`. */
export function within(promise, what, timeout = 10_000) {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no ${what} within ${timeout} ms`)), timeout);
    }),
  ]);
}

/** Record the requests a client writes, a frame each: {size, op, events?, msgIds?} (the
 * counts of a publish_batch's events and of an acknowledgement's msg_ids). */
export function tap(client) {
  const frames = [];
  const reader = new FrameReader(1 << 24);
  const write = client.socket.write.bind(client.socket);
  client.socket.write = (data, ...rest) => {
    reader.push(Buffer.from(data), (body) => {
      const request = cbor.decode(body);
      frames.push({ size: body.length, op: request.op,
        ...(request.events ? { events: request.events.length } : {}),
        ...(request.msg_ids ? { msgIds: request.msg_ids.length } : {}) });
    });
    return write(data, ...rest);
  };
  return frames;
}
