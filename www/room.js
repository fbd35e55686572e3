// @ts-check
// The Room view: when the page is served by `tokenometer serve`, what the room's users feel now,
// from the server's own counters (`GET /room`, computed by the Rust meter, crate/meter/room.rs):
// users connected and waiting, aggregate tok/s, each user's tok/s (median and slowest), TTFT p99.
// The page computes none of these; it formats them. Served elsewhere (no /room), it stays hidden.
import { format } from './run-view.js';

const POLL_MS = 500;

/** The figures shown, in order: [key in `room`, label, unit, digits]. */
const FIGURES = /** @type {const} */ ([
  ['users', 'users now', '', 0],
  ['waiting', 'waiting', '', 0],
  ['aggregate_tps', 'aggregate', 'tok/s', 1],
  ['per_user_tps_p50', 'per user, median', 'tok/s', 1],
  ['per_user_tps_min', 'per user, slowest', 'tok/s', 1],
  ['ttft_p99_ms', 'TTFT p99', 'ms', 0],
]);

export class RoomView {
  /**
   * @param {HTMLElement} root
   * @param {string} [url] where the room's figures are (default: this page's server)
   */
  constructor(root, url = new URL('room', location.href).href) {
    this.root = root;
    this.url = url;
    /** @type {ReturnType<typeof setTimeout> | null} */
    this.timer = null;
    root.hidden = true;
    root.innerHTML = `
      <h2>The room <small data-ref="conditions"></small></h2>
      <dl class="room-figures" data-testid="room-figures"></dl>
      <p class="note" data-ref="note">Every phone that opens this page from this server, or calls its API, is one user: all of them are decoded in one batch. Aggregate tok/s is what the server produces for the room; per-user tok/s is what each phone sees.</p>`;
    /** @type {HTMLElement} */
    this.figures = /** @type {HTMLElement} */ (root.querySelector('.room-figures'));
    /** @type {HTMLElement} */
    this.conditions = /** @type {HTMLElement} */ (root.querySelector('[data-ref=conditions]'));
    this.figures.innerHTML = FIGURES.map(
      ([key, label]) =>
        `<div><dt>${label}</dt><dd data-testid="room-${key}" aria-live="off">–</dd></div>`,
    ).join('');
  }

  /** Look for the server's room once, and if it answers keep the view live. */
  async start() {
    const first = await this.fetch();
    if (!first) return false;
    this.root.hidden = false;
    this.show(first);
    const poll = async () => {
      const data = await this.fetch();
      if (data) this.show(data);
      this.timer = setTimeout(poll, POLL_MS);
    };
    this.timer = setTimeout(poll, POLL_MS);
    return true;
  }

  stop() {
    if (this.timer !== null) clearTimeout(this.timer);
  }

  /** @returns {Promise<any | null>} */
  async fetch() {
    try {
      const response = await fetch(this.url, { cache: 'no-store' });
      if (!response.ok) return null;
      const data = await response.json();
      return data && typeof data.room === 'object' ? data : null;
    } catch {
      return null;
    }
  }

  /** @param {any} data */
  show(data) {
    const room = data.room;
    for (const [key, , unit, digits] of FIGURES) {
      const dd = /** @type {HTMLElement} */ (
        this.figures.querySelector(`[data-testid=room-${key}]`)
      );
      const value = room[key];
      dd.textContent =
        value === null || value === undefined
          ? '–'
          : `${format(value, digits)}${unit ? ` ${unit}` : ''}`;
    }
    this.conditions.textContent = `${data.model}, ${data.quant}, ${data.backend}; ${room.served} answered; aggregate over the last ${format(room.window_ms / 1000, 1)} s`;
  }
}
