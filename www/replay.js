// @ts-check
// Replay: play a finished run's text back at a chosen rate (5, 20, 30, 60 or 200 tok/s, or as
// measured, from the run's own timestamps) with the reader's cursor, so a room can feel what each
// speed is like without the model. The view says it is a replay and at what rate; nothing is
// measured during it.
import { RunView } from './run-view.js';
import { refs } from './dom.js';

export const REPLAY_RATES = [5, 20, 30, 60, 200];

export class Replay {
  /**
   * @param {HTMLElement} root
   * @param {() => number} wpm
   */
  constructor(root, wpm) {
    root.innerHTML = `
      <h2>Replay <small>feel a speed: a finished run's text, played back at the rate you pick</small></h2>
      <div class="row">
        <label>Rate
          <select data-testid="replay-rate" data-ref="rate">
            ${REPLAY_RATES.map((r) => `<option value="${r}">${r} tok/s</option>`).join('')}
            <option value="measured">as measured</option>
          </select>
        </label>
        <button type="button" data-testid="replay" data-ref="start" disabled>Replay the last run</button>
        <button type="button" data-ref="stop" disabled>Stop</button>
        <span>Status: <strong data-testid="replay-status" data-ref="status" role="status">no finished run yet</strong></span>
      </div>
      <div data-ref="view"></div>`;
    /** @type {Record<string, any>} */
    this.ref = refs(root);
    this.root = root;
    this.ref.rate.value = '30';
    this.view = new RunView(this.ref.view, { wpm, figures: false, label: 'Replay' });
    this.view.setConditions('A replay shows a finished run again; it does not run the model.');
    /** @type {import('./run-view.js').RunRecord | null} */
    this.record = null;
    /** @type {AbortController | null} */
    this.abort = null;
    this.ref.start.addEventListener('click', () => this.play());
    this.ref.stop.addEventListener('click', () => this.abort?.abort());
  }

  /**
   * The latest finished run, the one Replay plays.
   * @param {import('./run-view.js').RunRecord} record
   */
  offer(record) {
    if (!record.tokens.length) return;
    this.record = record;
    this.ref.start.disabled = this.abort !== null;
    if (this.abort === null) this.ref.status.textContent = 'ready';
  }

  /**
   * Play the last run at `rate` tok/s (the form's "Feel a speed" buttons).
   * @param {number} rate
   */
  playAt(rate) {
    this.ref.rate.value = String(rate);
    return this.play();
  }

  async play() {
    if (!this.record || this.abort) return;
    this.root.classList.add('playing');
    const raw = this.ref.rate.value;
    const rate = raw === 'measured' ? 'measured' : Number(raw);
    this.abort = new AbortController();
    this.ref.start.disabled = true;
    this.ref.stop.disabled = false;
    this.ref.status.textContent = `replaying at ${rate === 'measured' ? 'the measured rate' : `${rate} tok/s`}`;
    try {
      const ms = await this.view.replay(this.record, rate, this.abort.signal);
      this.ref.status.textContent = this.abort.signal.aborted
        ? 'stopped'
        : `done: ${this.record.tokens.length} tokens in ${(ms / 1000).toFixed(2)} s`;
    } finally {
      this.abort = null;
      this.root.classList.remove('playing');
      this.ref.start.disabled = false;
      this.ref.stop.disabled = true;
    }
  }
}
