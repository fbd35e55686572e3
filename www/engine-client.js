// @ts-check
// One engine in one Web Worker, as any part of the page uses it: load a model (once per
// configuration), run a prompt or a concurrency lab with events as they come, stop it with an
// AbortSignal. Every request has its own id (www/protocol.js), so a stop or a late reply never
// reaches another request. A fatal failure (a trap in the engine, a lost GPU device) fails every
// request in flight and starts a fresh worker; the next load starts from scratch.
import { nextId } from './protocol.js';

/** @typedef {import('./protocol.js').LoadSpec} LoadSpec */
/** @typedef {import('./protocol.js').Defaults} Defaults */

/**
 * A request in flight: who hears its replies, and how it ends.
 * @typedef {object} Pending
 * @property {(message: any) => void} onMessage
 * @property {(value: any) => void} resolve
 * @property {(error: Error) => void} reject
 */

// How long a stopped request may take to end before the worker is presumed stuck (a GPU that
// stopped answering) and replaced. A stop is normally heard within a pump, about a frame.
const STOP_GRACE_MS = 1500;

export class EngineClient {
  /** @param {string} [build]  the engine build its worker runs first (threads.js `buildFor`) */
  constructor(build) {
    this.build = build;
    /** @type {Map<number, Pending>} */
    this.pending = new Map();
    /** the configuration loaded in the worker now (its key), or null */
    this.loadedKey = null;
    /** @type {{ info: any, warmUpMs: number, threads: number, marks?: any[] } | null} */
    this.loaded = null;
    /** @type {Promise<Defaults>} */
    this.defaults = new Promise((resolve) => {
      this.resolveDefaults = resolve;
    });
    /** @type {((message: string) => void) | null} told when the engine had to be restarted */
    this.onRestart = null;
    this.start();
  }

  /**
   * Start (or restart) the worker, running `build` of the engine (threads.js `buildFor`); a load
   * that needs another build restarts it.
   * @param {string} [build]
   */
  start(build = this.build ?? 'relaxed') {
    this.worker?.terminate();
    this.loadedKey = null;
    this.loaded = null;
    const url = new URL('./worker.js', import.meta.url);
    this.build = build;
    // The default build keeps the worker's plain URL.
    if (build !== 'relaxed') url.searchParams.set('build', build);
    this.worker = new Worker(url, { type: 'module' });
    this.ready = new Promise((resolve) => {
      this.resolveReady = resolve;
    });
    this.worker.onmessage = ({ data }) => this.receive(data);
    this.worker.onerror = (e) => this.fatal(`the worker failed: ${e.message}`);
  }

  /** @param {import('./protocol.js').Reply} message */
  receive(message) {
    if (message.type === 'ready') return this.resolveReady?.(undefined);
    if (message.type === 'defaults') return this.resolveDefaults?.(message.defaults);
    if (message.type === 'fatal') return this.fatal(message.message);
    const id = 'id' in message ? message.id : undefined;
    const pending = id === undefined ? undefined : this.pending.get(id);
    if (!pending) {
      // An error that names no request (the engine failed to compile) fails them all.
      if (message.type === 'error' && id === undefined) this.failAll(message.message);
      return;
    }
    if (message.type === 'error') {
      this.pending.delete(/** @type {number} */ (id));
      pending.reject(new Error(message.message));
    } else {
      pending.onMessage(message);
    }
  }

  /** @param {string} message */
  failAll(message) {
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) p.reject(new Error(message));
  }

  /**
   * The engine trapped or lost its GPU: fail what is in flight and start a fresh worker.
   * @param {string} message
   */
  fatal(message) {
    this.failAll(`${message}; the engine was restarted`);
    this.start();
    this.onRestart?.(message);
  }

  /**
   * Send a request and collect its replies until `done(message)` says it is over.
   * @param {object} request
   * @param {(message: any) => void} onMessage
   * @param {(message: any) => boolean} done  whether this reply ends the request
   * @param {AbortSignal} [signal]
   * @returns {Promise<any>} the reply that ended it
   */
  request(request, onMessage, done, signal) {
    const id = nextId();
    return new Promise((resolve, reject) => {
      this.pending.set(id, {
        resolve,
        reject,
        onMessage: (message) => {
          onMessage(message);
          if (done(message)) {
            this.pending.delete(id);
            resolve(message);
          }
        },
      });
      this.worker?.postMessage({ ...request, id });
      const stop = () => {
        if (!this.pending.has(id)) return;
        this.worker?.postMessage({ type: 'cancel', id });
        setTimeout(() => {
          if (!this.pending.has(id)) return;
          this.pending.delete(id);
          reject(
            new Error(
              'the engine did not answer the stop and was restarted; the next run loads the model again',
            ),
          );
          this.start();
        }, STOP_GRACE_MS);
      };
      // A stop that came before the request (while the page measured the memory, say) stops it at once.
      if (signal?.aborted) stop();
      else signal?.addEventListener('abort', stop, { once: true });
    });
  }

  /**
   * Load a configuration, unless it is the one loaded now.
   * @param {LoadSpec & { key: string, build: string }} spec
   * @param {{ onProgress?: (p: any) => void, onStatus?: (status: string) => void, onFit?: (fit: any) => void, onLoaded?: (info: any) => void }} [hooks]
   * @returns {Promise<{ info: any, warmUpMs: number }>}
   */
  async load(spec, hooks = {}) {
    if (this.loadedKey === spec.key && this.loaded) return this.loaded;
    // The key names the build (app.js `spec`), so a new key may want a worker of another build.
    if (this.build !== spec.build) this.start(spec.build);
    this.loadedKey = null;
    await this.ready;
    const { key, build, ...request } = spec;
    /** @type {any} */
    let info = null;
    const warmed = await this.request(
      { type: 'load', ...request },
      (message) => {
        if (message.type === 'progress') hooks.onProgress?.(message);
        else if (message.type === 'fit') hooks.onFit?.(message.fit);
        else if (message.type === 'status') hooks.onStatus?.(message.status);
        else if (message.type === 'loaded') {
          // The engine's memory after loading, beside what the weights take (the worker measures it).
          info = {
            ...message.info,
            wasm_memory_bytes: message.wasmMemoryBytes,
            file_held_bytes: message.fileHeldBytes,
          };
          hooks.onLoaded?.(info);
        }
      },
      (message) => message.type === 'warmed',
    );
    this.loadedKey = key;
    // The worker's marks of its part of a cold start (ms since the epoch), for the first run's waterfall.
    this.loaded = {
      info,
      warmUpMs: warmed.ms,
      threads: request.threads ?? 1,
      marks: warmed.marks ?? [],
    };
    return this.loaded;
  }

  /**
   * This device's memory read bandwidth (GB/s) as `threads` threads of `build` see it: a worker
   * of its own reads a buffer far larger than the caches (crate/api/web/probe.rs) and is ended,
   * so the buffer's memory goes with it.
   * @param {string} build
   * @param {number} threads
   * @returns {Promise<number>}
   */
  static async readBandwidth(build, threads) {
    const probe = new EngineClient(build);
    try {
      await probe.ready;
      const reply = await probe.request(
        { type: 'probe', threads },
        () => {},
        (message) => message.type === 'probed',
      );
      return reply.read_gb_per_s;
    } finally {
      probe.worker?.terminate();
    }
  }

  /**
   * Load the draft model speculative decoding's `draft` choice runs (the loaded model at q4),
   * unless it is loaded; `onStatus` hears what the worker is doing.
   * @param {(status: string) => void} [onStatus]
   */
  async draft(onStatus) {
    if (this.loadedKey !== null && this.draftKey === this.loadedKey) return;
    await this.request(
      { type: 'draft' },
      (message) => {
        if (message.type === 'status') onStatus?.(message.status);
      },
      (message) => message.type === 'draft-loaded',
    );
    this.draftKey = this.loadedKey;
  }

  /**
   * Generate from `prompt` with the loaded model; `onEvents` hears every pump's events with the
   * meter's report and the output's word ends. Resolves to the final report (also when stopped).
   * @param {string} prompt
   * @param {object} options  crate/api/web/options.rs `RunOptions`
   * @param {{ signal?: AbortSignal, onEvents?: (message: import('./protocol.js').Events) => void, pumpMs?: number }} [hooks]
   *   `pumpMs`: how long the engine runs between its messages (about a frame unless given)
   * @returns {Promise<any>}
   */
  async run(prompt, options, hooks = {}) {
    const finished = await this.request(
      { type: 'run', prompt, options, pump_ms: hooks.pumpMs },
      (message) => {
        if (message.type === 'events') hooks.onEvents?.(message);
      },
      (message) => message.type === 'finished',
      hooks.signal,
    );
    /** the last run's final report, whose figures the page shows */
    this.lastReport = finished.report;
    return finished.report;
  }

  /**
   * OpenAI's chat API over the loaded model, for people who embed the engine:
   * `await client.chat.completions.create({ messages, stream: true, stream_options: { include_usage: true } })`
   * gives the server's chunks as an async iterable (`for await (const chunk of stream)`), the last
   * one's `usage.extra` the meter's report; without `stream`, the whole `chat.completion`. The
   * request is the server's (`tokenometer serve`, docs/serve.md); `signal` (an AbortSignal) ends
   * it early.
   */
  get chat() {
    return {
      completions: {
        create: (
          /** @type {any} */ request,
          /** @type {{ signal?: AbortSignal }} */ options = {},
        ) => this.createChat(request, options.signal),
      },
    };
  }

  /**
   * @param {any} request
   * @param {AbortSignal} [signal]
   */
  async createChat(request, signal) {
    await this.ready;
    /** @type {any[]} */
    const queue = [];
    /** @type {(() => void) | null} */
    let wake = null;
    let finished = false;
    /** @type {any} */
    let failure = null;
    const ended = this.request(
      { type: 'chat', request },
      (message) => {
        queue.push(...message.chunks);
        wake?.();
      },
      (message) => message.type === 'chat-chunks' && message.done,
      signal,
    );
    if (!request?.stream) return (await ended).chunks.at(-1);
    ended.then(
      () => {
        finished = true;
        wake?.();
      },
      (e) => {
        failure = e;
        wake?.();
      },
    );
    return (async function* chunks() {
      for (;;) {
        while (queue.length) yield queue.shift();
        if (failure) throw failure;
        if (finished) return;
        await new Promise((resolve) => {
          wake = () => resolve(undefined);
        });
        wake = null;
      }
    })();
  }

  /**
   * Reach an OpenAI-compatible endpoint: its API's base, the model to ask for (the one named, or
   * the first its /models lists) and the server's software where its headers say. No model loads.
   * @param {import('./protocol.js').EndpointChoice} choice
   * @returns {Promise<import('./protocol.js').Endpoint>}
   */
  async connect(choice) {
    await this.ready;
    const reply = await this.request(
      { type: 'connect', ...choice },
      () => {},
      (message) => message.type === 'connected',
    );
    return reply.endpoint;
  }

  /**
   * Stream `prompt` from an endpoint (as `connect` gave it, with its key), metered by the engine as
   * a local run is; `onEvents` hears each read's events with the report. Resolves to the final
   * report (also when stopped).
   * @param {import('./protocol.js').Endpoint} endpoint
   * @param {string} prompt
   * @param {object} options  crate/api/web/options.rs `RunOptions`
   * @param {{ signal?: AbortSignal, onEvents?: (message: import('./protocol.js').Events) => void }} [hooks]
   * @returns {Promise<any>}
   */
  async endpointRun(endpoint, prompt, options, hooks = {}) {
    await this.ready;
    const finished = await this.request(
      { type: 'endpoint-run', endpoint, prompt, options },
      (message) => {
        if (message.type === 'events') hooks.onEvents?.(message);
      },
      (message) => message.type === 'finished',
      hooks.signal,
    );
    return finished.report;
  }

  /**
   * Run a concurrency lab: with the loaded model (its users simulated in one batch), or against
   * `endpoint` (as `connect` gave it, with its key: every user a real stream from this browser),
   * metered by the engine either way. Resolves to its final load report.
   * @param {object} options  crate/api/web/options.rs `LabOptions`, with `slo_ttft_ms` and `slo_tpot_ms`
   * @param {{ signal?: AbortSignal, onEvents?: (message: import('./protocol.js').LabEvents) => void }} [hooks]
   * @param {import('./protocol.js').Endpoint | null} [endpoint]
   * @returns {Promise<any>}
   */
  async lab(options, hooks = {}, endpoint = null) {
    await this.ready;
    const request = endpoint
      ? { type: 'endpoint-lab', endpoint, options }
      : { type: 'lab', options };
    const finished = await this.request(
      request,
      (message) => {
        if (message.type === 'lab-events') hooks.onEvents?.(message);
      },
      (message) => message.type === 'lab-finished',
      hooks.signal,
    );
    /** the last lab level's final report, whose figures the lab shows */
    this.lastLabReport = finished.report;
    return finished.report;
  }

  /**
   * The meter's median, least and most of repeated measurements of one figure.
   * @param {number[]} values
   * @returns {Promise<{ n: number, median: number, min: number, max: number } | null>}
   */
  async spread(values) {
    await this.ready;
    const reply = await this.request(
      { type: 'spread', values },
      () => {},
      () => true,
    );
    return reply.spread;
  }

  /**
   * Each pair's figure over the other, by the meter's rule (`null` where undefined).
   * @param {[number | null, number | null][]} pairs
   * @returns {Promise<(number | null)[]>}
   */
  async versus(pairs) {
    await this.ready;
    const flat = pairs.flatMap(([a, b]) => [a ?? NaN, b ?? NaN]);
    const reply = await this.request(
      { type: 'versus', pairs: flat },
      () => {},
      () => true,
    );
    return reply.ratios;
  }

  /**
   * The GPU's ceilings on the device the loaded model runs on (crate/gpu/probe.rs): a read
   * kernel's bandwidth and what one more dispatch costs.
   * @returns {Promise<{ read_gb_per_s: number, dispatch_us: number, probe_bytes: number }>}
   */
  async measureGpu() {
    const reply = await this.request(
      { type: 'measure-gpu' },
      () => {},
      (message) => message.type === 'gpu-measured',
    );
    return reply.ceilings;
  }

  /**
   * `auto`'s timed decode on the loaded model: resolves to the meter's decode tok/s.
   * @returns {Promise<number>}
   */
  async raceDecode() {
    const reply = await this.request(
      { type: 'race-decode' },
      () => {},
      (message) => message.type === 'raced',
    );
    return reply.decode_tps;
  }

  /**
   * `auto`'s verdict from both entrants' figures (`{ label, decode_tps }`) and the GPU's check.
   * @param {{ label: string, decode_tps: number }} cpu
   * @param {{ label: string, decode_tps: number }} gpu
   * @param {object | null} check
   */
  async raceVerdict(cpu, gpu, check) {
    await this.ready;
    const reply = await this.request(
      { type: 'race-verdict', cpu, gpu, check },
      () => {},
      (message) => message.type === 'verdict',
    );
    return reply.verdict;
  }

  /**
   * Put `note` in the loaded model's conditions (how `auto` chose its backend); resolves to the
   * model's info.
   * @param {string} note
   */
  async setNote(note) {
    const reply = await this.request(
      { type: 'note', note },
      () => {},
      (message) => message.type === 'noted',
    );
    if (this.loaded) this.loaded.info = { ...this.loaded.info, ...reply.info };
    return reply.info;
  }

  /**
   * Take over `other`'s worker with what it has loaded (the race's winner becomes this client's
   * engine); `other` is left without one.
   * @param {EngineClient} other
   */
  adopt(other) {
    this.failAll('the engine was replaced');
    this.worker?.terminate();
    for (const key of ['worker', 'build', 'ready', 'loadedKey', 'loaded', 'draftKey']) {
      // @ts-ignore: the same fields on the same class
      this[key] = other[key];
    }
    if (this.worker) {
      this.worker.onmessage = ({ data }) => this.receive(data);
      this.worker.onerror = (e) => this.fatal(`the worker failed: ${e.message}`);
    }
    other.worker = undefined;
  }

  terminate() {
    this.failAll('the engine was closed');
    this.worker?.terminate();
    this.worker = undefined;
  }
}
