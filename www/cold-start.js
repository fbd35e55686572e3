// @ts-check
// The cold start as a waterfall: from opening the page to its first token, each part on one time
// axis where it began and ended (the page and its worker marked them; the meter adds the run's own
// parts and says what no part covers: crate/meter/cold.rs). A part that ran beside the others (the
// engine's compile during the download) is drawn hatched and not added. Drawn once, for the
// page's first run; a list under it says the same in words and numbers.

/**
 * @param {number} ms
 */
const seconds = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(0)} ms`);

/** @param {number} bytes */
const megabytes = (bytes) => `${(bytes / 1e6).toFixed(1)} MB`;

export class ColdStartView {
  /** @param {HTMLElement} root  an empty element the waterfall fills */
  constructor(root) {
    this.root = root;
    root.hidden = true;
    root.innerHTML = `
      <figure class="cold-start" data-testid="cold-start">
        <figcaption>From opening this page to its first token, part by part (the page's first run). Hatched: ran beside the others, not added.</figcaption>
        <ol class="cold-parts"></ol>
        <p class="note cold-sum"></p>
      </figure>`;
    this.list = /** @type {HTMLElement} */ (root.querySelector('.cold-parts'));
    this.sum = /** @type {HTMLElement} */ (root.querySelector('.cold-sum'));
    this.drawn = false;
  }

  /**
   * @param {{ parts: { name: string, start_ms: number, end_ms: number, bytes?: number, note?: string, parallel?: boolean }[], total_ms: number, parts_ms: number, between_ms: number }} cold
   */
  draw(cold) {
    if (this.drawn) return;
    this.drawn = true;
    this.root.hidden = false;
    const total = Math.max(cold.total_ms, 1e-9);
    this.list.replaceChildren(
      ...cold.parts.map((p) => {
        const ms = Math.max(0, p.end_ms - p.start_ms);
        const li = document.createElement('li');
        li.className = p.parallel ? 'cold-part parallel' : 'cold-part';
        li.dataset.ms = String(ms);
        li.dataset.parallel = String(Boolean(p.parallel));
        const label = document.createElement('span');
        label.className = 'cold-label';
        label.textContent = `${p.name}${p.bytes ? `, ${megabytes(p.bytes)}` : ''}${p.note ? ` (${p.note})` : ''}`;
        const track = document.createElement('span');
        track.className = 'cold-track';
        track.setAttribute('aria-hidden', 'true');
        const bar = document.createElement('span');
        bar.className = 'cold-bar';
        bar.style.left = `${(100 * Math.max(0, p.start_ms)) / total}%`;
        bar.style.width = `${Math.max(0.3, (100 * ms) / total)}%`;
        track.append(bar);
        const time = document.createElement('span');
        time.className = 'cold-ms';
        time.textContent = seconds(ms);
        li.append(label, track, time);
        return li;
      }),
    );
    this.sum.textContent = `Page open to first token ${seconds(cold.total_ms)}: the parts add to ${seconds(cold.parts_ms)}, and ${seconds(Math.max(0, cold.between_ms))} fell between them (messages between the page and its worker, the page's own work).`;
    this.sum.dataset.totalMs = String(cold.total_ms);
    this.sum.dataset.partsMs = String(cold.parts_ms);
  }
}
