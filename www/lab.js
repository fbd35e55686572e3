// @ts-check
// The concurrency lab: N users send requests at once (or as a Poisson process), simulated in this
// tab (the engine batches them) or as real streams from this browser to an endpoint (its server
// batches them, or does not). The view shows every user's text streaming in its own lane, the
// aggregate and per-user needles side by side, and, for a sweep over 1, 2, 4, 8 and 16 users, the
// curve of aggregate tok/s rising while per-user tok/s falls and TTFT climbs.
//
// A component: `new ConcurrencyLab(root, client)` builds its view inside `root`, so the page can hold
// more than one. Every figure comes from the engine's load report (computed in Rust); this file only
// draws them.
import { format, setText } from './run-view.js';
import { fillDefault, refs } from './dom.js';

/** Users per level in a sweep. */
export const SWEEP_LEVELS = [1, 2, 4, 8, 16];

/**
 * The most users the lab runs against an endpoint reached over `protocol`: a browser opens at most
 * 6 connections to one server over HTTP/1.1 (Chromium's and Firefox's limit), so a seventh user
 * would wait in this browser, not at the server, and the figures would blame the server for it.
 * HTTP/2 and 3 carry every stream on one connection.
 * @param {string | null} protocol  as the browser reached the endpoint (null: it did not say)
 */
export function endpointCap(protocol) {
  return protocol === 'h2' || protocol === 'h3' ? 16 : 6;
}

/**
 * What the lab needs from the page: a loaded model (or a reached endpoint) and the engine.
 * @typedef {object} LabClient
 * @property {() => Promise<import('./protocol.js').Endpoint | null>} prepare  load the model the page's settings name, or reach the endpoint they name (and resolve to it)
 * @property {() => import('./engine-client.js').EngineClient} engine
 * @property {(busy: boolean) => boolean} claim  take (true) or give back (false) the engine; false when a single run holds it
 * @property {() => number} readingWpm
 * @property {() => Promise<number | null>} readBandwidth  this device's memory read bandwidth in GB/s for the loaded engine (ceiling.js), or null
 * @property {(report: any) => void} finished  a level is over (its load report, for the results table)
 */

const TEMPLATE = `
  <h2>Concurrency lab <small>many users at once: batching raises what the system makes and lowers what each user sees</small></h2>
  <div class="row">
    <label>Users <input data-testid="lab-users" data-ref="users" type="number" min="1" max="16"></label>
    <label>Arrival
      <select data-testid="lab-arrival" data-ref="arrival">
        <option value="burst">all at once</option>
        <option value="poisson:4">Poisson, 4 a second</option>
        <option value="poisson:20">Poisson, 20 a second</option>
      </select>
    </label>
    <label>Tokens each <input data-ref="max" data-testid="lab-max" type="number" min="1" max="1024"></label>
    <label title="A request meets its objectives when its time to first token, and its time per output token after the first (vLLM's TPOT), are within these; goodput counts the requests a second that meet all those given">Objectives: TTFT ≤ <input data-ref="sloTtft" data-testid="lab-slo-ttft" type="number" min="1" step="any" placeholder="none" size="6"> ms,
      TPOT ≤ <input data-ref="sloTpot" data-testid="lab-slo-tpot" type="number" min="0.001" step="any" placeholder="none" size="6"> ms</label>
    <button type="button" data-testid="lab-start" data-ref="start">Start</button>
    <button type="button" data-testid="lab-sweep" data-ref="sweep">Sweep 1–16 users</button>
    <button type="button" data-testid="lab-stop" data-ref="stop" disabled>Stop</button>
    <span>Status: <strong data-testid="lab-status" data-ref="status" role="status">idle</strong></span>
  </div>
  <p class="error" data-testid="lab-error" data-ref="error" role="alert" hidden></p>
  <p class="conditions" data-testid="lab-conditions" data-ref="conditions">Each user gets its own prompt; the engine runs them all in one batch, one forward pass a step.
    Against an endpoint (Model: an OpenAI-compatible endpoint) every user is a real stream from this browser.</p>
  <p class="conditions" data-testid="lab-cap" data-ref="cap" hidden></p>
  <div class="lab-needles">
    <div class="needle"><span class="label">aggregate</span>
      <span class="big"><span data-testid="lab-aggregate-tps" data-ref="aggregate">–</span> <small>tok/s</small></span></div>
    <div class="needle"><span class="label">per user (median)</span>
      <span class="big"><span data-testid="lab-per-user-tps" data-ref="perUser">–</span> <small>tok/s</small></span></div>
  </div>
  <dl class="figures">
    <div><dt>slowest user</dt><dd><span data-testid="lab-per-user-min" data-ref="perUserMin">–</span> tok/s</dd></div>
    <div><dt title="Time to first token, queue included, across users">TTFT p50 / p99</dt><dd><span data-testid="lab-ttft-p50-ms" data-ref="ttftP50">–</span> / <span data-testid="lab-ttft-p99-ms" data-ref="ttftP99">–</span> ms</dd></div>
    <div><dt title="Gaps between tokens, every user's together">inter-token p99</dt><dd><span data-testid="lab-itl-p99-ms" data-ref="itlP99">–</span> ms</dd></div>
    <div><dt title="Reading speed as a decode rate, at the tokens per word the users' text showed">a reader</dt><dd><span data-testid="lab-reading-tps" data-ref="readingTps">–</span> tok/s</dd></div>
    <div><dt>completed</dt><dd><span data-testid="lab-completed" data-ref="completed">–</span></dd></div>
    <div><dt title="The requests a second that met every objective given, over the level's wall time, and the share of requests that did">goodput</dt>
      <dd><span data-testid="lab-goodput" data-ref="goodput">–</span> req/s (<span data-testid="lab-good-share" data-ref="goodShare">–</span>% good)</dd></div>
    <div><dt title="The step's matrix products alone, timed in the worker once the level has ended (CPU only): the aggregate tok/s this many users would reach if nothing else took time">ceiling: products alone</dt>
      <dd><span data-testid="lab-ceiling-tps" data-ref="ceiling">–</span> tok/s</dd></div>
    <div><dt title="This device's memory read bandwidth over the bytes a token reads at this batch: a step reads the weights once for all its users, so more users raise it">ceiling: memory bandwidth</dt>
      <dd><span data-testid="lab-bandwidth-tps" data-ref="bandwidth">–</span> tok/s</dd></div>
  </dl>
  <p class="conditions" data-testid="lab-ceiling-rates" data-ref="ceilingRates" hidden></p>
  <p class="conditions" data-testid="lab-bandwidth-sentence" data-ref="bandwidthSentence" hidden></p>
  <p class="error" data-testid="lab-failures" data-ref="failures" role="status" hidden></p>
  <div class="lab-lanes" data-ref="lanes"></div>
  <div class="lab-results">
    <figure>
      <canvas data-testid="lab-curve" data-ref="curve" width="760" height="300" role="img"
        aria-label="Aggregate and per-user tok/s, and TTFT p99, by number of users"></canvas>
      <figcaption>by users: <span class="key aggregate">aggregate tok/s</span>, <span class="key per-user">per-user tok/s (median)</span>,
        <span class="key ttft">TTFT p99 (ms, right axis)</span>, <span class="key ceiling">ceiling: the matrix products alone</span>, <span class="key bandwidth">ceiling: memory bandwidth (dotted)</span>; the fine dotted line is reading speed</figcaption>
    </figure>
    <table data-testid="lab-levels" tabindex="0">
      <caption>Levels run</caption>
      <thead><tr><th scope="col">users</th><th scope="col">aggregate tok/s</th><th scope="col">per user p50</th><th scope="col">slowest</th><th scope="col">TTFT p99 ms</th><th scope="col">keeps up with a reader</th><th scope="col" title="The step's matrix products alone, with nothing else (CPU only)">ceiling tok/s</th><th scope="col" title="Requests a second meeting the objectives given">goodput req/s</th><th scope="col" title="This device's memory bandwidth over the bytes a token reads at this level's batch">bandwidth ceiling tok/s</th></tr></thead>
      <tbody data-ref="levels"></tbody>
    </table>
  </div>
`;

/**
 * A ceiling's rates in words: what its products reached, in bytes and in arithmetic.
 * @param {{ rows: number, ms_p50: number, gb_per_s: number, gmac_per_s: number }} p
 */
function describeProducts(p) {
  return (
    `${p.rows} ${p.rows === 1 ? 'row' : 'rows'}: ${p.ms_p50.toFixed(2)} ms a step, ${p.gb_per_s.toFixed(1)} GB/s of weights, ` +
    `${p.gmac_per_s.toFixed(1)} billion multiply-adds/s`
  );
}

export class ConcurrencyLab {
  /**
   * @param {HTMLElement} root
   * @param {LabClient} client
   */
  constructor(root, client) {
    this.client = client;
    root.innerHTML = TEMPLATE;
    /** @type {Record<string, any>} */
    this.ref = refs(root);
    /** @type {any[]} the finished levels' reports, in the order run */
    this.levels = [];
    /** @type {{ users: number, max_tokens: number, arrival: string } | null} the engine's, once it has started */
    this.defaults = null;
    /** @type {AbortController | null} stops the running lab */
    this.abort = null;
    this.stopped = false;
    this.ref.start.addEventListener('click', () => this.start());
    this.ref.sweep.addEventListener('click', () => this.sweep());
    this.ref.stop.addEventListener('click', () => this.stop());
    this.drawCurve();
  }

  /**
   * The engine's defaults for a lab (crate/api/web/options.rs `defaults()`), for the fields not yet set.
   * @param {{ users: number, max_tokens: number, arrival: string }} defaults
   */
  setDefaults(defaults) {
    this.defaults = defaults;
    fillDefault(this.ref.users, defaults.users);
    fillDefault(this.ref.max, defaults.max_tokens);
    this.ref.arrival.value = defaults.arrival;
  }

  /** Run the chosen number of users once. */
  async start() {
    const users = Number(this.ref.users.value);
    if (!Number.isInteger(users) || users < 1 || users > 16)
      return this.fail(`${this.ref.users.value} users: choose 1 to 16`);
    await this.session(() => [users]);
  }

  /** Run every level of the sweep, one after another (against an endpoint, up to its cap). */
  async sweep() {
    await this.session((cap) => [...SWEEP_LEVELS.filter((n) => n < cap), cap]);
  }

  stop() {
    this.stopped = true;
    this.abort?.abort();
  }

  /**
   * Run the levels `pick` gives (from the most users this lab may run: 16 in this tab, an
   * endpoint's cap against one).
   * @param {(cap: number) => number[]} pick
   */
  async session(pick) {
    if (!this.client.claim(true))
      return this.fail('a single run is in progress: stop it or let it finish first');
    this.ref.error.hidden = true;
    this.stopped = false;
    this.setBusy(true);
    try {
      this.setStatus('loading');
      const endpoint = await this.client.prepare();
      const cap = endpoint ? endpointCap(endpoint.protocol) : 16;
      this.ref.cap.hidden = !endpoint;
      if (endpoint) {
        this.ref.cap.textContent =
          `Against ${endpoint.base}: every user is a real stream from this browser, at most ${cap} at once ` +
          (cap < 16
            ? `(the browser reached it over ${endpoint.protocol ?? 'HTTP/1.1 or a protocol it did not name'}, and a browser opens at most 6 connections to one server: more users would wait in this browser, not at the server)`
            : `(over ${endpoint.protocol}, one connection carries them all)`);
      }
      // This device's read bandwidth (measured once and kept, ceiling.js): each level's
      // bandwidth ceiling at its batch. None against an endpoint: its memory is the server's.
      const read = endpoint ? null : await this.client.readBandwidth();
      const levels = pick(cap);
      const over = levels.find((n) => n > cap);
      if (over)
        throw new Error(
          `${over} users: against this endpoint the lab runs at most ${cap} at once, as the line above says why; tokenometer bench --endpoint ${endpoint?.base} --concurrency ${over} drives more`,
        );
      for (const [i, users] of levels.entries()) {
        if (this.stopped) break;
        this.setStatus(
          levels.length > 1
            ? `running ${users} users (level ${i + 1} of ${levels.length})`
            : `running ${users} users`,
        );
        const report = await this.level(users, endpoint, read);
        this.client.finished(report);
        this.levels.push(report);
        this.addLevelRow(report);
        this.drawCurve();
      }
      this.setStatus(this.stopped ? 'stopped' : 'done');
    } catch (e) {
      this.fail(e instanceof Error ? e.message : String(e));
    } finally {
      this.abort = null;
      this.setBusy(false);
      this.client.claim(false);
    }
  }

  /**
   * One lab run of `users` users (against `endpoint`, when not null); resolves to its final load
   * report.
   * @param {number} users
   * @param {import('./protocol.js').Endpoint | null} endpoint
   * @param {number | null} read  this device's read bandwidth in GB/s, for the bandwidth ceiling
   * @returns {Promise<any>}
   */
  level(users, endpoint, read) {
    const lanes = this.makeLanes(users);
    /** @type {string[]} */
    const texts = Array.from({ length: users }, () => '');
    const options = {
      users,
      arrival: this.ref.arrival.value,
      max_tokens: Number(this.ref.max.value) || this.defaults?.max_tokens,
      reading_wpm: this.client.readingWpm(),
      // Objectives left empty are none; the engine refuses one that is not a positive number.
      slo_ttft_ms: this.ref.sloTtft.value === '' ? null : Number(this.ref.sloTtft.value),
      slo_tpot_ms: this.ref.sloTpot.value === '' ? null : Number(this.ref.sloTpot.value),
      ...(read ? { read_gb_per_s: read } : {}),
    };
    // What came since the last drawing: the lanes whose text grew, each user's latest figures,
    // the latest report. Drawn once a frame, and only those lanes, where every message rewrote
    // all 16 (the run view's drawing per token took about a core from the engine's workers,
    // docs/measurements.md; the lab's was not measured apart).
    const grown = new Set();
    /** @type {Map<number, any>} */
    const figures = new Map();
    let report = null;
    let frame = 0;
    const draw = () => {
      frame = 0;
      for (const seq of grown) lanes[seq].text.textContent = texts[seq].slice(-400);
      grown.clear();
      for (const [seq, f] of figures) this.laneFigures(lanes[seq], f);
      figures.clear();
      this.showReport(report);
      report = null;
    };
    this.abort = new AbortController();
    return this.client
      .engine()
      .lab(
        options,
        {
          signal: this.abort.signal,
          onEvents: (message) => {
            for (const { seq, ...event } of message.events) {
              // A local user's tokens, or an endpoint's chunks (each one or more tokens).
              if (event.event === 'token' || event.event === 'chunk') texts[seq] += event.text;
              else if (event.event === 'done') texts[seq] += event.trailing_text;
              else continue;
              if (lanes[seq]) grown.add(seq);
            }
            for (const f of message.users ?? []) figures.set(f.seq, f);
            report = message.report ?? report;
            frame ||= requestAnimationFrame(draw);
          },
        },
        endpoint,
      )
      .then((final) => {
        // The last of it now, not a frame later.
        cancelAnimationFrame(frame);
        draw();
        this.showReport(final);
        return final;
      });
  }

  /**
   * @param {number} users
   * @returns {{ text: HTMLElement, tps: HTMLElement, ttft: HTMLElement, state: HTMLElement }[]}
   */
  makeLanes(users) {
    const root = this.ref.lanes;
    root.replaceChildren();
    return Array.from({ length: users }, (_, seq) => {
      const lane = document.createElement('div');
      lane.className = 'lab-lane';
      lane.dataset.testid = 'lab-lane';
      lane.setAttribute('role', 'group');
      lane.setAttribute('aria-label', `user ${seq + 1}`);
      const head = document.createElement('div');
      head.className = 'lane-head';
      const make = (/** @type {string} */ tag, /** @type {string} */ className) => {
        const node = document.createElement(tag);
        node.className = className;
        return node;
      };
      const [tps, ttft, state] = [
        make('span', 'lane-tps'),
        make('span', 'lane-ttft'),
        make('span', 'lane-state'),
      ];
      tps.textContent = '–';
      ttft.textContent = '–';
      state.textContent = 'waiting';
      head.append(`user ${seq + 1} · `, tps, ' tok/s · TTFT ', ttft, ' ms · ', state);
      const text = make('div', 'lane-text');
      lane.append(head, text);
      root.append(lane);
      return { text, tps, ttft, state };
    });
  }

  /**
   * @param {{ text: HTMLElement, tps: HTMLElement, ttft: HTMLElement, state: HTMLElement } | undefined} lane
   * @param {{ tokens: number, ttft_ms: number | null, decode_tps: number | null, reason: string | null }} figures
   */
  laneFigures(lane, figures) {
    if (!lane) return;
    setText(lane.tps, format(figures.decode_tps, 0));
    setText(lane.ttft, format(figures.ttft_ms, 0));
    setText(
      lane.state,
      figures.reason
        ? figures.reason.replace('_', ' ')
        : figures.tokens
          ? `${figures.tokens} tokens`
          : 'waiting',
    );
  }

  /** @param {any} report */
  showReport(report) {
    if (!report) return;
    const r = this.ref;
    r.aggregate.textContent = format(report.aggregate_tps, 0);
    r.perUser.textContent = format(report.per_user_tps_p50, 0);
    r.perUserMin.textContent = format(report.per_user_tps_min, 0);
    r.ttftP50.textContent = format(report.ttft_ms_p50, 0);
    r.ttftP99.textContent = format(report.ttft_ms_p99, 0);
    r.itlP99.textContent = format(report.itl_ms_p99, 1);
    r.readingTps.textContent = format(report.reading_tps, 1);
    r.completed.textContent = `${report.requests_completed} of ${report.users}`;
    r.goodput.textContent = format(report.goodput?.requests_per_s, 2);
    r.goodShare.textContent = report.goodput ? format(100 * report.goodput.share, 0) : '–';
    r.conditions.textContent = report.summary;
    // Requests that failed (an endpoint's refusals, a broken stream), each reason once.
    const failures = report.failures ?? [];
    r.failures.hidden = !failures.length;
    r.failures.textContent = failures
      .map(([why, n]) => `${n} ${n === 1 ? 'request' : 'requests'} failed: ${why}`)
      .join(' · ');
    const products = report.products_alone;
    r.ceiling.textContent = format(products?.tps, 0);
    r.ceilingRates.textContent = products
      ? `Ceiling, the step's matrix products alone at ${describeProducts(products)}`
      : '';
    r.ceilingRates.hidden = !products;
    const bandwidth = report.bandwidth_ceiling;
    r.bandwidth.textContent = format(bandwidth?.tps, 0);
    r.bandwidthSentence.textContent = bandwidth
      ? `Ceiling, memory bandwidth: ${bandwidth.sentence[0].toUpperCase()}${bandwidth.sentence.slice(1)}.`
      : '';
    r.bandwidthSentence.hidden = !bandwidth;
  }

  /** @param {any} report */
  addLevelRow(report) {
    const row = document.createElement('tr');
    row.dataset.testid = 'lab-level';
    const keepsUp =
      report.per_user_below_reading === null ? '–' : report.per_user_below_reading ? 'no' : 'yes';
    for (const value of [
      String(report.users),
      format(report.aggregate_tps, 0),
      format(report.per_user_tps_p50, 0),
      format(report.per_user_tps_min, 0),
      format(report.ttft_ms_p99, 0),
      keepsUp,
    ]) {
      const cell = document.createElement('td');
      cell.textContent = value;
      row.append(cell);
    }
    const ceiling = document.createElement('td');
    ceiling.dataset.testid = 'lab-level-ceiling';
    ceiling.textContent = format(report.products_alone?.tps, 0);
    if (report.products_alone) ceiling.title = describeProducts(report.products_alone);
    const goodput = document.createElement('td');
    goodput.dataset.testid = 'lab-level-goodput';
    goodput.textContent = format(report.goodput?.requests_per_s, 2);
    const bandwidth = document.createElement('td');
    bandwidth.dataset.testid = 'lab-level-bandwidth';
    bandwidth.textContent = format(report.bandwidth_ceiling?.tps, 0);
    if (report.bandwidth_ceiling) bandwidth.title = report.bandwidth_ceiling.sentence;
    row.append(ceiling, goodput, bandwidth);
    row.title = report.summary;
    this.ref.levels.append(row);
  }

  /** The curve over the levels run so far (the latest at each number of users), by users on a log scale. */
  drawCurve() {
    /** @type {HTMLCanvasElement} */
    const canvas = this.ref.curve;
    const ctx = canvas.getContext('2d');
    if (!ctx) return;
    const { width, height } = canvas;
    const pad = { left: 70, right: 70, top: 16, bottom: 40 };
    ctx.clearRect(0, 0, width, height);
    const style = getComputedStyle(canvas);
    ctx.fillStyle = style.color;
    ctx.font = '16px system-ui, sans-serif';
    // The latest run at each number of users.
    const latest = new Map(this.levels.filter((l) => l.aggregate_tps).map((l) => [l.users, l]));
    const levels = [...latest.values()];
    if (!levels.length) {
      ctx.fillText(
        'Sweep draws aggregate and per-user tok/s by number of users here',
        pad.left,
        height / 2,
      );
      return;
    }
    const maxUsers = Math.max(2, ...levels.map((l) => l.users));
    const tpsMax =
      1.15 *
      Math.max(
        ...levels.map((l) =>
          Math.max(
            l.aggregate_tps ?? 0,
            l.per_user_tps_p50 ?? 0,
            l.reading_tps ?? 0,
            l.products_alone?.tps ?? 0,
            l.bandwidth_ceiling?.tps ?? 0,
          ),
        ),
      );
    const ttftMax = 1.15 * Math.max(1, ...levels.map((l) => l.ttft_ms_p99 ?? 0));
    const x = (/** @type {number} */ users) =>
      pad.left + (Math.log2(users) / Math.log2(maxUsers)) * (width - pad.left - pad.right);
    const y = (/** @type {number} */ v, /** @type {number} */ max) =>
      height - pad.bottom - (v / max) * (height - pad.top - pad.bottom);
    ctx.strokeStyle = style.color;
    ctx.beginPath();
    ctx.moveTo(pad.left, pad.top);
    ctx.lineTo(pad.left, height - pad.bottom);
    ctx.lineTo(width - pad.right, height - pad.bottom);
    ctx.lineTo(width - pad.right, pad.top);
    ctx.stroke();
    ctx.fillText(`${tpsMax.toFixed(0)} tok/s`, 2, pad.top + 12);
    ctx.fillText(`${ttftMax.toFixed(0)} ms`, width - pad.right + 6, pad.top + 12);
    for (let users = 1; users <= maxUsers; users *= 2)
      ctx.fillText(String(users), x(users) - 5, height - pad.bottom + 20);
    ctx.fillText('users', width / 2 - 20, height - 4);
    const series = [
      {
        pick: (/** @type {any} */ l) => l.aggregate_tps,
        max: tpsMax,
        color: style.getPropertyValue('--c-aggregate').trim() || '#f5a524',
        dash: [],
      },
      {
        pick: (/** @type {any} */ l) => l.per_user_tps_p50,
        max: tpsMax,
        color: style.getPropertyValue('--c-per-user').trim() || '#4e9af1',
        dash: [],
      },
      {
        pick: (/** @type {any} */ l) => l.ttft_ms_p99,
        max: ttftMax,
        color: style.getPropertyValue('--c-ttft').trim() || '#d35ec6',
        dash: [8, 6],
      },
      {
        pick: (/** @type {any} */ l) => l.products_alone?.tps,
        max: tpsMax,
        color: style.getPropertyValue('--muted').trim() || '#a9b3bd',
        dash: [14, 6],
      },
      {
        pick: (/** @type {any} */ l) => l.bandwidth_ceiling?.tps,
        max: tpsMax,
        color: style.getPropertyValue('--muted').trim() || '#a9b3bd',
        dash: [3, 4],
      },
    ];
    const sorted = [...levels].sort((a, b) => a.users - b.users);
    ctx.lineWidth = 3;
    for (const s of series) {
      // A ceiling a level lacks (products on a GPU, bandwidth against an endpoint): no line.
      if (sorted.some((l) => s.pick(l) == null)) continue;
      ctx.strokeStyle = s.color;
      ctx.fillStyle = s.color;
      ctx.setLineDash(s.dash);
      ctx.beginPath();
      sorted.forEach((l, i) =>
        i
          ? ctx.lineTo(x(l.users), y(s.pick(l), s.max))
          : ctx.moveTo(x(l.users), y(s.pick(l), s.max)),
      );
      ctx.stroke();
      for (const l of sorted) ctx.fillRect(x(l.users) - 4, y(s.pick(l), s.max) - 4, 8, 8);
    }
    // Reading speed (as tok/s at the observed tokens per word), and where users fall below it.
    const reading = sorted.find((l) => l.reading_tps)?.reading_tps;
    ctx.lineWidth = 1;
    if (reading) {
      ctx.strokeStyle = style.color;
      ctx.setLineDash([3, 5]);
      ctx.beginPath();
      ctx.moveTo(pad.left, y(reading, tpsMax));
      ctx.lineTo(width - pad.right, y(reading, tpsMax));
      ctx.stroke();
      ctx.fillStyle = style.color;
      ctx.fillText('reading speed', pad.left + 6, y(reading, tpsMax) - 6);
    }
    ctx.setLineDash([]);
    const below = sorted.find((l) => l.per_user_below_reading);
    if (below) {
      ctx.fillStyle = style.color;
      ctx.fillText(
        `below reading speed from ${below.users} users`,
        x(below.users) - 60,
        pad.top + 32,
      );
    }
  }

  /** @param {boolean} busy */
  setBusy(busy) {
    this.ref.start.disabled = busy;
    this.ref.sweep.disabled = busy;
    this.ref.stop.disabled = !busy;
  }

  /** @param {string} status */
  setStatus(status) {
    this.ref.status.textContent = status;
  }

  /** @param {string} message */
  fail(message) {
    this.ref.error.textContent = message;
    this.ref.error.hidden = false;
    this.setStatus('error');
  }
}
