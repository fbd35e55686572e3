// @ts-check
// One run's view: its conditions, the live needle beside the reader, the text with a reader's
// cursor, then every figure of the meter's report and the tok/s-by-position chart (in that order,
// so that a projector's first screen holds the needle and the text). A component: `new RunView(root, ...)`
// builds it inside `root`, so the page holds one for the main run, one per lane and one for a
// replay. It draws what the engine reports and computes no figure: the report comes from the meter
// in Rust, and so do the word ends the reader's cursor walks (the meter's word rule).
import { refs } from './dom.js';
import { ColdStartView } from './cold-start.js';
import { PhaseBar } from './phases.js';
import { TokenView } from './tokens.js';

/** Whether the token inspector is on (kept across visits, for every view). */
const SHOW_TOKENS = 'tokenometer.showTokens';

const FIGURES = `
  <div><dt title="Time to first token: queue + tokenization + prefill + first sample">TTFT</dt><dd><span data-testid="metric-ttft-ms" data-figure="ttft_ms" data-digits="1">–</span> ms</dd></div>
  <div><dt title="The one batched forward pass over the prompt">prefill</dt><dd><span data-testid="metric-prefill-ms" data-figure="prefill_ms" data-digits="1">–</span> ms</dd></div>
  <div><dt>prefill speed</dt><dd><span data-testid="metric-prefill-tps" data-figure="prefill_tps" data-digits="1">–</span> tok/s</dd></div>
  <div><dt title="Tokens after the first, over the time from first to last token">decode</dt><dd><span data-testid="metric-decode-tps" data-figure="decode_tps" data-digits="1">–</span> tok/s</dd></div>
  <div><dt>inter-token p50 / p99</dt><dd><span data-testid="metric-itl-p50" data-figure="inter_token_ms.p50" data-digits="2">–</span> / <span data-testid="metric-itl-p99" data-figure="inter_token_ms.p99" data-digits="2">–</span> ms</dd></div>
  <div><dt>words</dt><dd><span data-testid="metric-words-per-s" data-figure="words_per_s" data-digits="1">–</span> words/s</dd></div>
  <div><dt title="Words per second over a reader's words per second">vs. a reader</dt><dd><span data-testid="metric-reading-x" data-figure="reading_speed_x" data-digits="1">–</span> × reading speed</dd></div>
  <div><dt title="Weight bytes read per token × decode tok/s">bandwidth</dt><dd><span data-testid="metric-gbps" data-figure="effective_gb_per_s" data-digits="3">–</span> GB/s</dd></div>
  <div><dt title="A decode token reads every weight once and the keys and values of every earlier position: this device's memory read bandwidth (measured once: on the CPU at the engine's threads, on WebGPU by a read kernel, over a buffer far larger than the caches) over those bytes is the fastest decode can go.">bandwidth ceiling</dt><dd><span data-testid="metric-ceiling-tps" data-figure="bandwidth_ceiling.tps" data-digits="0">–</span> tok/s <small>(this run <span data-testid="metric-ceiling-share" data-figure="bandwidth_ceiling.share" data-scale="100" data-digits="0">–</span> % of it; memory reads <span data-testid="metric-device-gbps" data-figure="bandwidth_ceiling.read_gb_per_s" data-digits="1">–</span> GB/s)</small></dd></div>
  <div><dt title="On WebGPU every dispatch costs some microseconds whatever its size: a token's dispatches times what one costs (an empty kernel's, measured once) is the least a token can take, and its inverse the most tok/s.">dispatch floor</dt><dd><span data-testid="metric-dispatch-floor-tps" data-figure="dispatch_floor.tps" data-digits="0">–</span> tok/s <small>(<span data-testid="metric-dispatches-per-token" data-figure="dispatch_floor.dispatches_per_token" data-digits="0">–</span> dispatches a token at <span data-testid="metric-dispatch-us" data-figure="dispatch_floor.dispatch_us" data-digits="1">–</span> us)</small></dd></div>
  <div><dt title="Speculative decoding: the drafts the model kept, of those proposed; drafts kept per verification pass; the model's passes per decoded token (1 without speculation)">drafts kept</dt><dd><span data-testid="metric-acceptance" data-figure="speculation.acceptance_rate" data-scale="100" data-digits="0">–</span> % <small>(<span data-testid="metric-kept-per-pass" data-figure="speculation.accepted_per_verification" data-digits="2">–</span> a pass, <span data-testid="metric-passes-per-token" data-figure="speculation.passes_per_token" data-digits="2">–</span> passes a token)</small></dd></div>
  <div><dt>total</dt><dd><span data-testid="metric-total-ms" data-figure="total_ms" data-digits="0">–</span> ms <small>(predicted <span data-figure="predicted_total_ms" data-digits="0">–</span>)</small></dd></div>
  <div><dt>stop</dt><dd data-testid="stop-reason" data-ref="stopReason">–</dd></div>`;

const OPEN_TO_FIRST = `
  <div><dt title="From opening this page to its first generated token: the page, the wait for Run, the download, loading, warm-up and the first run's TTFT (the waterfall below says each part)">page open to first token</dt><dd><span data-testid="metric-open-to-first-token-s" data-ref="openToFirst">–</span> s</dd></div>`;

/**
 * A finished run as kept for replay: its prompt, every token's text and time (ms since the request),
 * the output's word ends, and its final report.
 * @typedef {{ prompt: string, promptTokens?: { id: number, bytes: number[] }[], tokens: { text: string, t: number, id?: number, logprobs?: any, chunkTokens?: any[] }[], points: { pos: number, rate: number | null }[], trailing: string, wordEnds: number[], report: any }} RunRecord
 */

export class RunView {
  /**
   * @param {HTMLElement} root
   * @param {object} options
   * @param {() => number} options.wpm  the reader's words a minute
   * @param {boolean} [options.figures]  show the meter's figures (a replay shows none: it measures nothing)
   * @param {boolean} [options.pageOpen]  show the page-open-to-first-token figure (the page's first run)
   * @param {string} [options.label]  the view's name for assistive technology
   */
  constructor(root, { wpm, figures = true, pageOpen = false, label = 'Run' }) {
    this.wpm = wpm;
    root.classList.add('run-view');
    root.innerHTML = `
      <div class="meter" role="group" aria-label="${label}: meter">
        <p class="conditions" data-testid="conditions" data-ref="conditions">No model loaded.</p>
        <div class="needle">
          <span class="label" data-ref="needleLabel">live decode</span>
          <span class="big"><span data-testid="metric-live-tps" data-ref="live">–</span> <small>tok/s</small></span>
          ${figures ? `<span class="versus" title="Words per second over a reader's words per second"><span data-figure="reading_speed_x" data-digits="1">–</span> × a reader</span>` : ''}
          ${figures ? `<span class="ceiling" data-ref="ceiling" hidden><meter min="0" max="1" low="0.5" high="0.85" optimum="1" data-testid="ceiling-gauge" data-ref="ceilingGauge" aria-label="decode as a share of what this device's memory allows"></meter> <span><span data-ref="ceilingShare">–</span>% <span data-ref="ceilingWhat">of what memory allows</span></span></span>` : ''}
        </div>
      </div>
      <div class="output-section" role="group" aria-label="${label}: generated text">
        <h2>Output <small>the bar is where a reader at the chosen speed would be</small></h2>
        <label class="show-tokens"><input type="checkbox" data-testid="show-tokens" data-ref="showTokens"> Show tokens <small>(ids, and each generated token's probability and alternatives)</small></label>
        <div data-ref="tokenView" hidden></div>
        <div data-testid="output" class="output" data-ref="output" aria-live="off" tabindex="0"><span class="prompt-echo" data-ref="promptEcho"></span><span data-ref="read"></span><span class="cursor" aria-hidden="true"></span><span data-ref="ahead"></span></div>
        <p class="note" data-testid="drafted-legend" data-ref="draftedLegend" hidden><mark class="drafted">Tinted</mark>: drafts the model kept (speculative decoding): each tinted run of tokens came from one pass of the model.</p>
      </div>
      <div class="details" role="group" aria-label="${label}: figures">
        ${
          figures
            ? `<dl class="figures">${FIGURES}${pageOpen ? OPEN_TO_FIRST : ''}</dl>
        <p class="note" data-testid="ceiling-sentence" data-ref="ceilingSentence" hidden></p>
        <div data-ref="phases"></div>
        ${pageOpen ? '<div data-ref="coldStart"></div>' : ''}
        <p class="note" data-testid="speculation-steps" data-ref="speculationSteps" title="What a step cost by how many drafts it verified: the other side of the drafts kept" hidden></p>`
            : ''
        }
        <figure>
          <canvas data-ref="chart" width="900" height="220" role="img" aria-label="Tokens per second by output token"></canvas>
          <figcaption>tok/s by output token (each dot: the tokens that arrived over the gap before them, as the meter gives it; line: live window)</figcaption>
        </figure>
      </div>`;
    /** @type {Record<string, any>} */
    this.ref = refs(root);
    this.tokenView = new TokenView(this.ref.tokenView);
    /** the phase bar, where the view shows figures */
    this.phaseBar = this.ref.phases ? new PhaseBar(this.ref.phases) : null;
    /** the first run's cold start, where the view shows the page-open figure */
    this.coldStart = this.ref.coldStart ? new ColdStartView(this.ref.coldStart) : null;
    this.ref.showTokens.checked = localStorage.getItem(SHOW_TOKENS) === '1';
    this.ref.showTokens.addEventListener('change', () => {
      localStorage.setItem(SHOW_TOKENS, this.ref.showTokens.checked ? '1' : '0');
      this.changed = true;
      this.scheduleRender();
    });
    /** @type {HTMLElement[]} */
    this.figureNodes = [...root.querySelectorAll('[data-figure]')].map(
      (n) => /** @type {HTMLElement} */ (n),
    );
    this.frame = 0;
    /**
     * The least time between two drawings, in ms (0: every frame that has something new). Each
     * drawing costs the whole machine more than its script: on this project's 2-core machine
     * (headless Chromium, software compositing) a frame of this page took about 7 ms of the
     * page's main thread and as much again in the compositor and raster threads (a trace of
     * SmolLM2 Q8_0's 128 tokens: 0.96 s of main thread, 0.76 s of compositor, display and
     * raster, in 2 s), so the page sets a pace when the engine runs on every core.
     */
    this.paceMs = 0;
    /**
     * While a run goes on, the least time between two drawings of its figures, chart, gauge and
     * phases (0: at each drawing); the text keeps `paceMs`. On 2 cores at 2 threads (SmolLM2
     * Q8_0, 128 tokens) the page kept 0.77-0.79 of the harness's worker alone with everything
     * drawn every 100 ms, 0.78-1.02 with the figures every 500 (docs/measurements.md, the page at
     * 2 threads, its figures drawn twice a second).
     */
    this.figuresPaceMs = 0;
    /** when the last drawing began (performance.now()) */
    this.lastDrawn = -Infinity;
    /** when the figures and chart were last drawn, and whether a report came since */
    this.figuresDrawn = -Infinity;
    this.figuresStale = false;
    /** what the page adds to a run's conditions line (its build's note, the memory, the warm-up) */
    this.conditionsNote = '';
    /** whether events or a report came since the last drawing (else only the reading cursor moves) */
    this.changed = true;
    /** @type {ReturnType<typeof setTimeout> | undefined} the reading cursor's next step */
    this.readerTick = undefined;
    /** @type {ReturnType<typeof setTimeout> | undefined} a drawing waiting for its pace */
    this.paced = undefined;
    this.clear('');
  }

  /**
   * Start showing a new run of `prompt`.
   * @param {string} prompt
   */
  clear(prompt) {
    this.text = '';
    this.trailing = '';
    /** @type {{ text: string, t: number, id?: number, logprobs?: any, chunkTokens?: any[] }[]} */
    this.tokens = [];
    /** @type {{ pos: number, rate: number | null, live: number | null }[]} */
    this.points = [];
    /** @type {number[]} */
    this.wordEnds = [];
    /** @type {[number, number][]} the output's spans (UTF-16 offsets) that were drafts the model kept */
    this.drafted = [];
    /** @type {{ at: number, len: number, drafts: number } | null} the text as last drawn: where the reader was, its length, its kept drafts */
    this.shownText = null;
    this.figuresDrawn = -Infinity;
    this.figuresStale = false;
    this.report = null;
    this.running = false;
    /** @type {number | null} when the first token showed (performance.now()), for the reader */
    this.readerStart = null;
    /** @type {string | null} set while replaying: the needle shows this rate, never a measurement */
    this.replayRate = null;
    this.prompt = prompt;
    /** @type {{ id: number, bytes: number[] }[] | undefined} the prompt's tokens, when the run sent them */
    this.promptTokens = undefined;
    this.tokenView?.clear();
    this.phaseBar?.clear();
    this.ref.stopReason && (this.ref.stopReason.textContent = '–');
    if (this.ref.speculationSteps) this.ref.speculationSteps.hidden = true;
    this.ref.promptEcho.textContent = prompt;
    for (const node of this.figureNodes) node.textContent = '–';
    this.ref.live.textContent = '–';
    if (this.ref.ceiling) this.ref.ceiling.hidden = this.ref.ceilingSentence.hidden = true;
    this.ref.needleLabel.textContent = 'live decode';
    this.scheduleRender();
  }

  /** @param {string} text */
  setConditions(text) {
    // Its title is the whole line (presenter's mode shows two lines of it); both written only
    // when the line changed, as every drawing sets it.
    if (this.ref.conditions.textContent === text) return;
    this.ref.conditions.textContent = text;
    this.ref.conditions.title = text;
  }

  /** @param {number} seconds */
  setOpenToFirst(seconds) {
    if (this.ref.openToFirst) this.ref.openToFirst.textContent = seconds.toFixed(2);
  }

  /**
   * A pump's events, with the rate chart's points they add, the meter's report and word ends as
   * of its last event.
   * @param {{ events: any[], points?: { token: number, rate: number | null }[], report?: any, word_ends?: number[], token_note?: string }} message
   */
  update({ events, points = [], report, word_ends: wordEnds, token_note: tokenNote }) {
    this.running = true;
    if (tokenNote) this.tokenView.setNote(tokenNote);
    if (report) this.report = report;
    if (wordEnds) this.wordEnds = wordEnds;
    // The chart's points are the meter's (each arrival's tokens over its gap); the live figure
    // comes with the pump's report, so it belongs to the pump's last point.
    for (const [i, p] of points.entries()) {
      this.points.push({
        pos: p.token,
        rate: p.rate,
        live: report && i === points.length - 1 ? report.live_decode_tps : null,
      });
    }
    for (const event of events) {
      if (event.event === 'prefill' && event.prompt) {
        this.tokenView.setPrompt(event.prompt);
        this.promptTokens = event.prompt;
      } else if (event.event === 'token') {
        if (event.drafted && event.text)
          this.drafted.push([this.text.length, this.text.length + event.text.length]);
        this.text += event.text;
        this.tokens.push({
          text: event.text,
          t: event.t_ms,
          id: event.id,
          logprobs: event.logprobs ?? null,
        });
        this.tokenView.add(event.id, event.text, event.logprobs ?? null);
        if (this.readerStart === null) this.readerStart = performance.now();
      } else if (event.event === 'chunk') {
        // An endpoint's chunk: its text (a chunk may carry several tokens, or none yet), and its
        // tokens with their probabilities where the server sent them.
        this.text += event.text;
        this.tokens.push({ text: event.text, t: event.t_ms, chunkTokens: event.logprobs });
        this.tokenView.addChunk(event.text, event.logprobs);
        if (this.readerStart === null) this.readerStart = performance.now();
      } else if (event.event === 'done') {
        this.trailing = event.trailing_text;
        this.text += event.trailing_text;
        if (this.ref.stopReason) this.ref.stopReason.textContent = event.reason.replace('_', ' ');
      }
    }
    this.scheduleRender();
  }

  /**
   * The run is over: its final report.
   * @param {any} report
   */
  finish(report) {
    if (report) this.report = report;
    this.running = false;
    // Drawn now, whatever the pace: the run's final figures are on the page when it says done. A
    // drawing still waiting for its pace is dropped, or it would begin a second chain of drawings
    // beside the next run's (seen in CI: two drawings 17 ms apart at a pace of 100 ms).
    clearTimeout(this.paced);
    if (this.frame > 0) cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.changed = true;
    this.lastDrawn = performance.now();
    this.render();
  }

  /** @returns {RunRecord} the run as shown, for replay */
  record() {
    return {
      prompt: this.prompt,
      promptTokens: this.promptTokens,
      tokens: [...this.tokens],
      points: this.points.map(({ pos, rate }) => ({ pos, rate })),
      trailing: this.trailing,
      wordEnds: [...this.wordEnds],
      report: this.report,
    };
  }

  /**
   * Play `record` back: tokens appear at `rate` tok/s, or at the run's own timestamps when `rate`
   * is 'measured'. Resolves when the last token is shown (or `signal` aborts). Nothing is
   * measured: the needle shows the rate chosen, labelled a replay.
   * @param {RunRecord} record
   * @param {number | 'measured'} rate
   * @param {AbortSignal} [signal]
   */
  async replay(record, rate, signal) {
    this.clear(record.prompt);
    // A replay runs no engine: nothing to leave the cores to.
    this.paceMs = 0;
    this.figuresPaceMs = 0;
    this.replayRate = rate === 'measured' ? 'as measured' : `${rate} tok/s`;
    this.ref.needleLabel.textContent = `replay, ${this.replayRate}`;
    const measured = record.report?.decode_tps;
    this.ref.live.textContent =
      rate === 'measured' ? (Number.isFinite(measured) ? measured.toFixed(0) : '–') : String(rate);
    this.setConditions(
      `Replay of a finished run at ${this.replayRate}: the model is not running, the text is played back. Run: ${record.report?.summary ?? ''}`,
    );
    this.running = true;
    if (record.promptTokens) this.tokenView.setPrompt(record.promptTokens);
    const t0 = record.tokens[0]?.t ?? 0;
    const start = performance.now();
    for (const [i, token] of record.tokens.entries()) {
      const due = rate === 'measured' ? token.t - t0 : (i * 1000) / rate;
      const wait = start + due - performance.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      if (signal?.aborted) break;
      this.text += token.text;
      if (token.id === undefined) this.tokenView.addChunk(token.text, token.chunkTokens);
      else this.tokenView.add(token.id, token.text, token.logprobs ?? null);
      if (this.readerStart === null) this.readerStart = performance.now();
      // The chart shows the run's own rates (the meter's points), as far as the replay has come
      // (an endpoint's record holds chunks, which may carry several points' tokens).
      const shown = Math.ceil(((i + 1) * record.points.length) / record.tokens.length);
      while (this.points.length < shown)
        this.points.push({ ...record.points[this.points.length], live: null });
      // The word ends of the whole text, as far as the text shown so far reaches.
      this.wordEnds = record.wordEnds.filter((end) => end <= this.text.length);
      this.scheduleRender();
    }
    if (!signal?.aborted) this.text += record.trailing;
    this.wordEnds = record.wordEnds.filter((end) => end <= this.text.length);
    this.running = false;
    this.scheduleRender();
    return performance.now() - start;
  }

  /**
   * Draw at the next frame: what changed since the last (`changed`: new events or a report; false:
   * the reading cursor alone). At most one drawing a frame, and none while nothing changes: on a
   * page whose engine runs on every core, each drawing takes its time from the engine (measured
   * with tests/bench/page_threads.mjs: SmolLM2 Q8_0 at 2 threads on 2 cores decoded at 0.53x the
   * harness's worker alone while the view redrew every frame).
   */
  scheduleRender(changed = true) {
    this.changed ||= changed;
    if (this.frame) return;
    // At most one drawing each `paceMs` (after the last began), at a frame.
    const wait = this.paceMs - (performance.now() - this.lastDrawn);
    const draw = () => {
      this.frame = requestAnimationFrame(() => {
        this.lastDrawn = performance.now();
        this.render();
      });
    };
    if (wait > 0) {
      this.frame = -1;
      this.paced = setTimeout(draw, wait);
    } else {
      draw();
    }
  }

  render() {
    this.frame = 0;
    clearTimeout(this.readerTick);
    const report = this.report;
    if (this.changed) {
      this.changed = false;
      this.figuresStale = true;
      this.renderTokens();
    }
    if (
      this.figuresStale &&
      (!this.running || performance.now() - this.figuresDrawn >= this.figuresPaceMs)
    ) {
      this.figuresStale = false;
      this.figuresDrawn = performance.now();
      if (report && this.replayRate === null) {
        this.setConditions(`${report.summary}${this.conditionsNote}`);
        for (const node of this.figureNodes) {
          const value = pick(report, node.dataset.figure ?? '');
          setText(
            node,
            format(
              typeof value === 'number' ? value * Number(node.dataset.scale ?? 1) : value,
              Number(node.dataset.digits),
            ),
          );
        }
        setText(
          this.ref.live,
          format(this.running ? report.live_decode_tps : report.decode_tps, 0),
        );
        // The gauge: decode as a share of what the memory allows (the meter's sentence says which
        // bound holds and why).
        // On WebGPU the gauge is against the nearer of the bandwidth ceiling and the dispatch
        // floor (the one the run comes closer to), and both sentences follow.
        const ceiling = report.bandwidth_ceiling;
        const floor = report.dispatch_floor;
        if (this.ref.ceiling) {
          this.ref.ceiling.hidden = !ceiling;
          this.ref.ceilingSentence.hidden = !ceiling;
          if (ceiling) {
            const nearer = floor && (floor.share ?? 0) > (ceiling.share ?? 0) ? floor : ceiling;
            this.ref.ceilingGauge.value = Math.min(1, nearer.share ?? 0);
            setText(this.ref.ceilingShare, format((nearer.share ?? NaN) * 100, 0));
            this.ref.ceilingWhat.textContent =
              nearer === floor ? 'of what its dispatches allow' : 'of what memory allows';
            const said = [ceiling.sentence, floor?.sentence]
              .filter(Boolean)
              .map((s) => `${s[0].toUpperCase()}${s.slice(1)}.`);
            setText(this.ref.ceilingSentence, said.join(' '));
          }
        }
        this.phaseBar?.draw(report, this.running);
        if (report.cold_start) this.coldStart?.draw(report.cold_start);
        if (this.ref.speculationSteps) {
          setText(this.ref.speculationSteps, report.speculation?.steps_summary ?? '');
          this.ref.speculationSteps.hidden = !this.ref.speculationSteps.textContent;
        }
      }
      this.drawChart();
    }
    this.renderText();
    // The reading cursor moves a word at a time: draw again when the reader reaches the next
    // word, until the reader has caught up.
    const words = this.readerWords();
    if (this.readerStart !== null && words < this.wordEnds.length) {
      const next = ((Math.floor(words) + 1 - words) * 60000) / this.wpm();
      this.readerTick = setTimeout(() => this.scheduleRender(false), Math.max(16, next));
    }
  }

  /** Whether the token inspector is shown: then runs ask the engine for log probabilities. */
  showsTokens() {
    return this.ref.showTokens.checked;
  }

  /** The token inspector in place of the text, when shown; drawn only then. */
  renderTokens() {
    const show = this.showsTokens();
    setHidden(this.ref.tokenView, !show);
    setHidden(this.ref.output, show);
    if (!show) return;
    this.tokenView.setWords(this.wordEnds.length);
    this.tokenView.draw();
  }

  readerWords() {
    if (this.readerStart === null) return 0;
    return ((performance.now() - this.readerStart) / 60000) * this.wpm();
  }

  renderText() {
    const ends = this.wordEnds;
    const words = Math.floor(this.readerWords());
    const at = words === 0 ? 0 : words >= ends.length ? this.text.length : ends[words - 1];
    // Text nodes only: the model's output is never parsed as HTML. Kept drafts are tinted marks.
    const len = this.text.length;
    const drafts = this.drafted.length;
    const was = this.shownText;
    if (was && was.at === at && was.len === len && was.drafts === drafts) return;
    this.shownText = { at, len, drafts };
    setHidden(this.ref.draftedLegend, !drafts);
    if (drafts || !was || at < was.at || len < was.len) {
      this.ref.read.replaceChildren(...this.pieces(0, at));
      this.ref.ahead.replaceChildren(...this.pieces(at, len));
      return;
    }
    // Without drafts the text only grows and the reader only moves on: what the reader passed
    // moves from the start of the text ahead to the end of the text read, and new text goes at
    // the end in a text node of its own. A text node changed is laid out and painted again from
    // its start, and the text ahead starts where the reader is, far behind the model; so new
    // text never goes into a node already drawn (measured: with the output hidden, the page at
    // 2 threads kept 0.97 of the harness's worker; with the text ahead one node, 0.78-0.87).
    if (at > was.at) {
      const passed = Math.min(at, was.len) - was.at;
      this.ref.read.append(document.createTextNode(this.text.slice(was.at, at)));
      cutStart(this.ref.ahead, passed);
    }
    const from = Math.max(at, was.len);
    if (len > from) this.ref.ahead.append(document.createTextNode(this.text.slice(from, len)));
  }

  /**
   * The output from `from` to `to` as text nodes, with the kept drafts in it as marks.
   * @param {number} from
   * @param {number} to
   * @returns {Node[]}
   */
  pieces(from, to) {
    const nodes = [];
    let at = from;
    for (const [start, end] of this.drafted) {
      if (end <= at || start >= to) continue;
      if (start > at) nodes.push(document.createTextNode(this.text.slice(at, start)));
      const mark = document.createElement('mark');
      mark.className = 'drafted';
      mark.textContent = this.text.slice(Math.max(start, at), Math.min(end, to));
      nodes.push(mark);
      at = Math.min(end, to);
    }
    if (at < to) nodes.push(document.createTextNode(this.text.slice(at, to)));
    return nodes;
  }

  drawChart() {
    const canvas = /** @type {HTMLCanvasElement} */ (this.ref.chart);
    const ctx = canvas.getContext('2d');
    if (!ctx) return;
    const { width, height } = canvas;
    const pad = { left: 64, right: 12, top: 12, bottom: 34 };
    ctx.clearRect(0, 0, width, height);
    const points = this.points.filter((p) => p.rate !== null);
    const style = getComputedStyle(canvas);
    ctx.fillStyle = style.color;
    ctx.font = '16px system-ui, sans-serif';
    if (!points.length) {
      ctx.fillText('tok/s by output token appears here as tokens arrive', pad.left, height / 2);
      return;
    }
    const rates = points.map((p) => /** @type {number} */ (p.rate)).sort((a, b) => a - b);
    const yMax = Math.max(1, rates[Math.floor(rates.length * 0.98)] * 1.2);
    const minPos = this.points[0].pos;
    const maxPos = Math.max(minPos + 1, this.points[this.points.length - 1].pos);
    const x = (/** @type {number} */ pos) =>
      pad.left + ((pos - minPos) / (maxPos - minPos)) * (width - pad.left - pad.right);
    const y = (/** @type {number} */ rate) =>
      height - pad.bottom - (Math.min(rate, yMax) / yMax) * (height - pad.top - pad.bottom);
    ctx.strokeStyle = style.color;
    ctx.beginPath();
    ctx.moveTo(pad.left, pad.top);
    ctx.lineTo(pad.left, height - pad.bottom);
    ctx.lineTo(width - pad.right, height - pad.bottom);
    ctx.stroke();
    ctx.fillText(`${yMax.toFixed(0)} tok/s`, 2, pad.top + 12);
    ctx.fillText('0', pad.left - 16, height - pad.bottom);
    ctx.fillText(`output token ${minPos}`, pad.left, height - 10);
    ctx.fillText(`${maxPos}`, width - pad.right - 40, height - 10);
    ctx.fillStyle = '#4e9af1';
    for (const p of points)
      ctx.fillRect(x(p.pos) - 1.5, y(/** @type {number} */ (p.rate)) - 1.5, 3, 3);
    ctx.strokeStyle = '#f5a524';
    ctx.lineWidth = 3;
    ctx.beginPath();
    let started = false;
    for (const p of this.points) {
      if (p.live === null || p.live === undefined) continue;
      if (started) ctx.lineTo(x(p.pos), y(p.live));
      else ctx.moveTo(x(p.pos), y(p.live));
      started = true;
    }
    ctx.stroke();
    ctx.lineWidth = 1;
  }
}

/**
 * Set `node`'s text, leaving it alone when it is the same (a write would lay the page out again).
 * @param {HTMLElement} node
 * @param {string} text
 */
export function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

/**
 * A report's figure by its path (`inter_token_ms.p99`).
 * @param {any} report
 * @param {string} path
 */
function pick(report, path) {
  return path.split('.').reduce((value, key) => value?.[key], report);
}

/**
 * @param {number | null | undefined} value
 * @param {number} digits
 */
export function format(value, digits) {
  return value === null || value === undefined || !Number.isFinite(value)
    ? '–'
    : value.toFixed(digits);
}

/**
 * Remove the first `count` characters of `element`'s text nodes.
 * @param {HTMLElement} element
 * @param {number} count
 */
function cutStart(element, count) {
  let left = count;
  while (left > 0 && element.firstChild instanceof Text) {
    const first = element.firstChild;
    if (first.length <= left) {
      left -= first.length;
      first.remove();
    } else {
      first.deleteData(0, left);
      left = 0;
    }
  }
}

/**
 * Set `element.hidden`, and leave it alone when it is already so.
 * @param {HTMLElement} element
 * @param {boolean} hidden
 */
function setHidden(element, hidden) {
  if (element.hidden !== hidden) element.hidden = hidden;
}
