// A WebDriver (classic, W3C) session over HTTP, for WebKitGTK's WebKitWebDriver, which speaks
// nothing else (puppeteer-core drives Firefox over WebDriver BiDi). Only what the browser tests
// use: a session, navigation, and scripts run in the page.
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';

/** A free port on 127.0.0.1. */
const freePort = () =>
  new Promise((ok, fail) => {
    const probe = createServer()
      .listen(0, '127.0.0.1', () => {
        const { port } = /** @type {import('node:net').AddressInfo} */ (probe.address());
        probe.close(() => ok(port));
      })
      .on('error', fail);
  });

/**
 * Start `driver` (a WebDriver server's binary) on a free port on 127.0.0.1 and open a session
 * with `capabilities`.
 * @param {string} driver
 * @param {object} capabilities
 */
export async function startSession(driver, capabilities) {
  const port = await freePort();
  const server = spawn(driver, [`--host=127.0.0.1`, `--port=${port}`], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const base = `http://127.0.0.1:${port}`;
  /** @param {string} method @param {string} path @param {object} [body] */
  const call = async (method, path, body) => {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: { 'Content-Type': 'application/json' },
      body: body && JSON.stringify(body),
    });
    const answer = await response.json();
    if (!response.ok)
      throw new Error(
        `${driver} ${method} ${path}: ${answer.value?.error}: ${answer.value?.message}`,
      );
    return answer.value;
  };
  for (let tries = 0; ; tries += 1) {
    const up = await fetch(`${base}/status`).then(
      (r) => r.ok,
      () => false,
    );
    if (up) break;
    if (tries > 100) throw new Error(`${driver} did not listen on ${base}`);
    await new Promise((ok) => setTimeout(ok, 100));
  }
  let session;
  try {
    session = await call('POST', '/session', { capabilities: { alwaysMatch: capabilities } });
  } catch (e) {
    server.kill();
    throw e;
  }
  const at = `/session/${session.sessionId}`;
  return {
    version: session.capabilities.browserVersion,
    /** @param {string} url */
    goto: (url) => call('POST', `${at}/url`, { url }),
    /** Run `script` (a function's body) in the page with `args`; its return value. @param {string} script @param {any[]} [args] */
    run: (script, args = []) => call('POST', `${at}/execute/sync`, { script, args }),
    async close() {
      await call('DELETE', at).catch(() => {});
      server.kill();
    },
  };
}
