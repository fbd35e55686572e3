// @ts-check
// Lanes: two to four configurations (model x quantization x backend, or an endpoint) run the same
// prompt side by side, each in its own worker with its own view and meter, at once or one after
// another. After
// the run, one line per pair compares them: decode tok/s and TTFT as ratios of the engine's own
// reports, and whether their first 40 tokens are the same.
import { EngineClient } from './engine-client.js';
import {
  BACKENDS,
  QUANTS,
  SPECULATES,
  BACKEND_ALIASES,
  BACKEND_CHOICES,
  QUANT_CHOICES,
  SPECULATE_CHOICES,
  speculateOptions,
} from './protocol.js';
import { RunView, format } from './run-view.js';
import { rowFromReport } from './results.js';
import { refs } from './dom.js';
import { buildFor, shareThreads } from './threads.js';

export const MAX_LANES = 4;
/** How lanes run: all at once (one worker each), or one after another. */
export const LANE_MODES = ['parallel', 'sequential'];
// Tokens compared for "same text" in a verdict.
const SAME_TOKENS = 40;

/**
 * One lane's configuration: `model` is a model id of the page's list, or '' for the page's model;
 * `speculate` is speculative decoding's choice (protocol.js SPECULATE_CHOICES).
 * @typedef {{ backend: string, quant: string, model: string, speculate: string }} LaneConfig
 */

/**
 * What the lanes need from the page.
 * @typedef {object} LanesHost
 * @property {{ id: string, label: string }[]} models  the models a lane can pick (by id)
 * @property {(config: LaneConfig, threads: number) => import('./protocol.js').LoadSpec & { key: string, build: string }} spec  what to load for a lane, on `threads` CPU threads
 * @property {(config: LaneConfig) => { url: string, model: string, key: string } | null} endpoint  the endpoint a lane runs against: the form's, for a lane on "the model chosen above" when the form chose an endpoint; otherwise null
 * @property {() => number} threads  the CPU threads chosen in the form
 * @property {() => Promise<{ prompt: string, options: object, drafts: number | null }>} settings  the prompt and run options of the page's form, and its fixed draft length (`drafts=N`)
 * @property {() => number} wpm
 * @property {(row: any) => void} addResult
 * @property {(record: import('./run-view.js').RunRecord) => void} finished  a lane's run is over (for replay)
 */

/**
 * Parse a preset's `lanes=` value: lanes separated by commas, each `backend:quant`,
 * `backend:quant:model` or `backend:quant:model:speculate` (model may be empty: `cpu:q8::lookup`).
 * Throws an error naming every value that is not a choice.
 * @param {string} value
 * @param {string[]} models  the model ids a lane may name
 * @returns {LaneConfig[]}
 */
export function parseLanes(value, models) {
  const problems = [];
  const lanes = value.split(',').map((part, i) => {
    const [rawBackend = '', rawQuant = '', model = '', rawSpeculate = '', ...rest] = part
      .trim()
      .split(':');
    const speculate = rawSpeculate.toLowerCase() || 'off';
    const backend =
      /** @type {Record<string, string>} */ (BACKEND_ALIASES)[rawBackend.toLowerCase()] ??
      rawBackend.toLowerCase();
    const quant = rawQuant.toLowerCase();
    const where = `lane ${i + 1} ("${part}")`;
    if (rest.length) problems.push(`${where} has more than backend:quant:model:speculate`);
    if (!SPECULATES.includes(speculate))
      problems.push(
        `${where}: speculate "${rawSpeculate}" is not a choice (${SPECULATES.join(', ')})`,
      );
    if (!BACKENDS.includes(backend))
      problems.push(
        `${where}: backend "${rawBackend}" is not a choice (${BACKENDS.join(', ')}; webgpu means wgpu)`,
      );
    if (!QUANTS.includes(quant))
      problems.push(`${where}: quant "${rawQuant}" is not a choice (${QUANTS.join(', ')})`);
    if (model && !models.includes(model))
      problems.push(`${where}: model "${model}" is not one of ${models.join(', ')}`);
    return { backend, quant, model, speculate };
  });
  if (lanes.length > MAX_LANES) problems.push(`${lanes.length} lanes: at most ${MAX_LANES}`);
  if (problems.length) throw new Error(`lanes=${value}: ${problems.join('; ')}`);
  return lanes;
}

/** @param {LaneConfig} lane */
export function laneToString(lane) {
  const speculate = lane.speculate && lane.speculate !== 'off' ? `:${lane.speculate}` : '';
  return `${lane.backend}:${lane.quant}${lane.model || speculate ? `:${lane.model}` : ''}${speculate}`;
}

const TEMPLATE = `
  <h2>Lanes <small>the same prompt on two to four configurations, side by side</small></h2>
  <p>Each lane has its own engine (a worker). <em>At once</em> shares this machine's cores between the lanes (the CPU threads chosen above are divided between the CPU lanes), so each is slower than alone, which is itself a lesson; <em>one after another</em> measures each alone, on all the threads chosen.</p>
  <p class="conditions" data-testid="lanes-threads" data-ref="threads" hidden></p>
  <div data-ref="configs" class="lane-configs"></div>
  <div class="row">
    <button type="button" data-testid="add-lane" data-ref="add">Add lane</button>
    <label>Lanes run
      <select data-testid="lanes-mode" data-ref="mode">
        <option value="parallel">at once (one worker each)</option>
        <option value="sequential">one after another</option>
      </select>
    </label>
    <button type="button" data-testid="run-lanes" data-ref="run">Run lanes</button>
    <button type="button" data-testid="stop-lanes" data-ref="stop" disabled>Stop</button>
    <span>Status: <strong data-testid="lanes-status" data-ref="status" role="status">idle</strong></span>
  </div>
  <p class="error" data-testid="lanes-error" data-ref="error" role="alert" hidden></p>
  <ul class="verdicts" data-testid="lane-verdicts" data-ref="verdicts" aria-live="polite"></ul>
  <div class="lanes" data-ref="lanes"></div>
`;

export class LanesPanel {
  /**
   * @param {HTMLElement} root
   * @param {LanesHost} host
   */
  constructor(root, host) {
    this.host = host;
    root.innerHTML = TEMPLATE;
    /** @type {Record<string, any>} */
    this.ref = refs(root);
    /** @type {LaneConfig[]} */
    this.configs = [];
    /** @type {EngineClient[]} one engine per lane, kept loaded between runs */
    this.clients = [];
    /** @type {AbortController | null} */
    this.abort = null;
    /** whether the lanes have run (or were set by a preset): Share then includes them */
    this.used = false;
    this.ref.add.addEventListener('click', () =>
      this.addLane({ backend: 'cpu', quant: 'q8', model: '', speculate: 'off' }),
    );
    this.ref.run.addEventListener('click', () => this.run());
    this.ref.stop.addEventListener('click', () => this.abort?.abort());
    this.setLanes([
      { backend: 'cpu', quant: 'f32', model: '', speculate: 'off' },
      { backend: 'cpu', quant: 'q8', model: '', speculate: 'off' },
    ]);
  }

  /** `parallel` or `sequential` (LANE_MODES) */
  get mode() {
    return this.ref.mode.value;
  }

  set mode(mode) {
    this.ref.mode.value = mode;
  }

  /** @param {LaneConfig[]} configs */
  setLanes(configs) {
    this.configs = configs.map((c) => ({ ...c }));
    this.renderConfigs();
  }

  /** @param {LaneConfig} config */
  addLane(config) {
    if (this.configs.length >= MAX_LANES) return;
    this.configs.push(config);
    this.renderConfigs();
  }

  /** @param {number} i */
  removeLane(i) {
    this.configs.splice(i, 1);
    this.clients.splice(i, 1).forEach((c) => c.terminate());
    this.renderConfigs();
  }

  renderConfigs() {
    const rows = this.configs.map((config, i) => {
      const row = document.createElement('fieldset');
      row.className = 'lane-config';
      const legend = document.createElement('legend');
      legend.textContent = `Lane ${i + 1}`;
      row.append(legend);
      /**
       * @param {string} label
       * @param {keyof LaneConfig} key
       * @param {[string, string][]} choices
       */
      const select = (label, key, choices) => {
        const wrap = document.createElement('label');
        wrap.append(label, ' ');
        const input = document.createElement('select');
        input.dataset.testid = `lane-${key}`;
        for (const [value, text] of choices) input.add(new Option(text, value));
        input.value = config[key];
        input.addEventListener('change', () => {
          config[key] = input.value;
        });
        wrap.append(input);
        return wrap;
      };
      row.append(
        select('Model', 'model', [
          ['', 'the model chosen above'],
          ...this.host.models.map((m) => /** @type {[string, string]} */ ([m.id, m.label])),
        ]),
        select('Backend', 'backend', BACKEND_CHOICES),
        select('Quantization', 'quant', QUANT_CHOICES),
        select('Speculation', 'speculate', SPECULATE_CHOICES),
      );
      const remove = document.createElement('button');
      remove.type = 'button';
      remove.textContent = 'Remove';
      remove.setAttribute('aria-label', `Remove lane ${i + 1}`);
      remove.disabled = this.configs.length <= 1;
      remove.addEventListener('click', () => this.removeLane(i));
      row.append(remove);
      return row;
    });
    this.ref.configs.replaceChildren(...rows);
    this.ref.add.disabled = this.configs.length >= MAX_LANES;
  }

  /** Run every lane on the page's prompt and settings. */
  async run() {
    if (this.abort) return;
    this.used = true;
    this.ref.error.hidden = true;
    this.ref.verdicts.replaceChildren();
    const abort = new AbortController();
    this.abort = abort;
    this.setBusy(true);
    this.ref.status.textContent = 'running';
    try {
      const { prompt, options, drafts } = await this.host.settings();
      while (this.clients.length < this.configs.length) this.clients.push(new EngineClient());
      const configs = this.configs.map((c) => ({ ...c }));
      // Lanes at once divide the chosen CPU threads between the CPU lanes; one after another, each has them all.
      const chosen = this.host.threads();
      const cpuLanes = configs.filter((c) => c.backend === 'cpu' && !this.host.endpoint(c)).length;
      const each = this.mode === 'parallel' ? shareThreads(chosen, cpuLanes) : chosen;
      const threads = configs.map((c) => buildFor(c.backend, each).threads);
      const shared = this.mode === 'parallel' && cpuLanes > 1 && chosen > 1;
      this.ref.threads.textContent = shared
        ? `At once: the ${chosen} CPU threads chosen are divided between ${cpuLanes} CPU lanes, ${each} each (at least one).`
        : '';
      this.ref.threads.hidden = !shared;
      const lanes = configs.map((config, i) => this.makeLane(config, i, threads[i]));
      this.ref.lanes.replaceChildren(...lanes.map((l) => l.root));
      const one = (/** @type {number} */ i) =>
        this.runLane(lanes[i], this.clients[i], prompt, options, drafts, abort.signal);
      if (this.mode === 'parallel') await Promise.all(lanes.map((_, i) => one(i)));
      else for (const i of lanes.keys()) if (!abort.signal.aborted) await one(i);
      await this.verdicts(lanes);
      this.ref.status.textContent = abort.signal.aborted
        ? 'stopped'
        : lanes.some((l) => l.failed)
          ? 'error'
          : 'done';
    } catch (e) {
      this.ref.error.textContent = e instanceof Error ? e.message : String(e);
      this.ref.error.hidden = false;
      this.ref.status.textContent = 'error';
    } finally {
      this.abort = null;
      this.setBusy(false);
    }
  }

  /**
   * @param {LaneConfig} config
   * @param {number} i
   * @param {number} threads  the CPU threads it runs on
   */
  makeLane(config, i, threads) {
    const root = document.createElement('section');
    root.className = 'lane';
    root.dataset.testid = 'lane';
    root.setAttribute('aria-label', `Lane ${i + 1}: ${laneToString(config)}`);
    const head = document.createElement('h3');
    const status = document.createElement('span');
    status.dataset.testid = 'lane-status';
    status.setAttribute('role', 'status');
    status.textContent = 'waiting';
    const speculating =
      config.speculate && config.speculate !== 'off' ? `, speculating (${config.speculate})` : '';
    const endpoint = this.host.endpoint(config);
    // A lane on an endpoint: the server decides quantization, backend and speculation.
    const label = endpoint
      ? `the endpoint ${endpoint.url}${endpoint.model ? ` (${endpoint.model})` : ''}`
      : `${config.quant} on ${config.backend}${threads > 1 ? ` (${threads} threads)` : ''}${config.model ? `, ${config.model}` : ''}${speculating}`;
    head.append(`Lane ${i + 1}: ${label} · `, status);
    const error = document.createElement('p');
    error.className = 'error';
    error.setAttribute('role', 'alert');
    error.hidden = true;
    const body = document.createElement('div');
    root.append(head, error, body);
    const view = new RunView(body, { wpm: this.host.wpm, label: `Lane ${i + 1}` });
    return {
      root,
      status,
      error,
      view,
      config,
      threads,
      label,
      index: i,
      report: /** @type {any} */ (null),
      failed: false,
    };
  }

  /**
   * @param {ReturnType<LanesPanel['makeLane']>} lane
   * @param {EngineClient} client
   * @param {string} prompt
   * @param {object} options
   * @param {number | null} drafts  a fixed draft length (`drafts=N`), or null
   * @param {AbortSignal} signal
   */
  async runLane(lane, client, prompt, options, drafts, signal) {
    try {
      const choice = this.host.endpoint(lane.config);
      if (choice) {
        lane.status.textContent = 'reaching the endpoint';
        const endpoint = { ...(await client.connect(choice)), key: choice.key || undefined };
        lane.view.setConditions(
          `${endpoint.model} at ${endpoint.base}${endpoint.server ? ` (${endpoint.server})` : ''}`,
        );
        if (signal.aborted) {
          lane.status.textContent = 'stopped';
          return;
        }
        lane.status.textContent = 'running';
        lane.view.clear(prompt);
        const report = await client.endpointRun(endpoint, prompt, options, {
          signal,
          onEvents: (message) => lane.view.update(message),
        });
        this.finishLane(lane, report, report.summary);
        return;
      }
      lane.status.textContent = 'loading';
      const { info, warmUpMs } = await client.load(this.host.spec(lane.config, lane.threads), {
        onStatus: (status) => {
          lane.status.textContent = status;
        },
        onProgress: ({ loaded, total }) => {
          lane.status.textContent = `downloading ${total ? Math.round((100 * loaded) / total) : 0}%`;
        },
      });
      const note = info.build_note ? ` · ${info.build_note}` : '';
      lane.view.setConditions(
        `${info.model} · ${info.quant} · ${info.backend} (${info.adapter})${note} · warm-up ${warmUpMs.toFixed(0)} ms (apart)`,
      );
      if (lane.config.speculate === 'draft')
        await client.draft((status) => {
          lane.status.textContent = status;
        });
      if (signal.aborted) {
        lane.status.textContent = 'stopped';
        return;
      }
      lane.status.textContent = 'running';
      lane.view.clear(prompt);
      const speculate = lane.config.speculate || 'off';
      const report = await client.run(
        prompt,
        {
          ...options,
          ...speculateOptions(speculate, drafts),
          requested_at: performance.timeOrigin + performance.now(),
        },
        {
          signal,
          onEvents: (message) => lane.view.update(message),
        },
      );
      this.finishLane(
        lane,
        report,
        `${report.summary}${note} · warm-up ${warmUpMs.toFixed(0)} ms (apart)`,
      );
    } catch (e) {
      lane.failed = true;
      lane.error.textContent = e instanceof Error ? e.message : String(e);
      lane.error.hidden = false;
      lane.status.textContent = 'error';
    }
  }

  /**
   * A lane's run is over: its final report, its conditions line, its row and its replay.
   * @param {ReturnType<LanesPanel['makeLane']>} lane
   * @param {any} report
   * @param {string} conditions
   */
  finishLane(lane, report, conditions) {
    lane.view.finish(report);
    lane.view.setConditions(conditions);
    lane.report = report;
    this.host.addResult(rowFromReport(report, `lane ${lane.index + 1}`));
    this.host.finished(lane.view.record());
    lane.status.textContent = 'done';
  }

  /**
   * One line per pair of finished lanes: the later lane against the earlier.
   * @param {ReturnType<LanesPanel['makeLane']>[]} lanes
   */
  async verdicts(lanes) {
    const done = lanes.filter((l) => l.report);
    const pairs = done.flatMap((a, i) => done.slice(i + 1).map((b) => [a, b]));
    // The ratios are the meter's (`meter::versus`), from the lanes' reports.
    const ratios = await this.clients[0].versus(
      pairs.flatMap(([a, b]) => [
        [b.report.decode_tps, a.report.decode_tps],
        [b.report.ttft_ms, a.report.ttft_ms],
      ]),
    );
    const times = (/** @type {number | null} */ x) => (x === null ? '–' : `${format(x, 2)}x`);
    const lines = [];
    for (const [k, [a, b]] of pairs.entries()) {
      const n = Math.min(SAME_TOKENS, a.view.tokens.length, b.view.tokens.length);
      const start = (/** @type {typeof a} */ l) =>
        l.view.tokens
          .slice(0, n)
          .map((t) => t.text)
          .join('');
      const same = `same first ${n} tokens: ${start(a) === start(b) ? 'yes' : 'no'}`;
      const li = document.createElement('li');
      li.dataset.testid = 'lane-verdict';
      li.textContent = `${b.label} (lane ${b.index + 1}): ${times(ratios[2 * k])} the decode tok/s of ${a.label} (lane ${a.index + 1}), TTFT ${times(ratios[2 * k + 1])}, ${same}`;
      lines.push(li);
    }
    this.ref.verdicts.replaceChildren(...lines);
  }

  /** @param {boolean} busy */
  setBusy(busy) {
    this.ref.run.disabled = busy;
    this.ref.stop.disabled = !busy;
    this.ref.add.disabled = busy || this.configs.length >= MAX_LANES;
  }
}
