// @ts-check
// Where a token's time goes: the meter's `phases` (the CPU engine's own timers by phase, averaged
// in Rust: crate/meter/phases.rs) as a column for each 16 decode tokens, stacked by part, and a
// table of the mean step that says the same in numbers for anyone who cannot see the columns.
// It computes no figure; it draws only when a new column or the run's end arrives.

/** The parts, in the meter's order, with their colours (the table's swatches say which is which). */
const PARTS = [
  ['projections_ms', 'projections', '#4e9af1'],
  ['attention_ms', 'attention', '#d35ec6'],
  ['norms_ms', 'norms and activations', '#5fb878'],
  ['classifier_ms', 'classifier', '#f5a524'],
  ['sampling_ms', 'sampling', '#e05d5d'],
  ['other_ms', "the engine's other work", '#8c96a0'],
];
const BETWEEN = '#c8ced4';
// crate/model/phases.rs PAGE_TIMED_EVERY: the page's CPU engine times one decode step in 4.
const CPU_CAPTION =
  "Where a decode step's time goes, by the engine's own timers (one step in 4, as the timers cost the run): a column for each 16 tokens, its height the step's time.";
// crate/gpu/timer.rs: each run of one kind of dispatch in a profile window of its own (CubeCL's), one decode step in 8.
const GPU_CAPTION =
  "Where a decode step's time goes on this GPU, by the device's timestamps around each run of dispatches of one kind (one step in 8, as timing slows the step): a column for each 16 tokens. A dispatch is fused: attention's holds its norm and the q, k and v products, the projections' the rest with their norms; the engine's other work is the host's recording and the time between dispatches.";

/**
 * @param {HTMLElement} node
 * @param {string} text
 */
const setText = (node, text) => {
  if (node.textContent !== text) node.textContent = text;
};

export class PhaseBar {
  /** @param {HTMLElement} root  an empty element the bar fills */
  constructor(root) {
    this.root = root;
    root.innerHTML = `
      <figure class="phases" data-testid="phases">
        <div class="phase-columns" aria-hidden="true"></div>
        <figcaption></figcaption>
        <table class="phase-table">
          <caption class="visually-hidden">A decode step's time by part</caption>
          <thead><tr><th scope="col">part</th><th scope="col">ms a step</th><th scope="col">share</th></tr></thead>
          <tbody></tbody>
        </table>
        <p class="note phase-sentence"></p>
      </figure>`;
    this.columns = /** @type {HTMLElement} */ (root.querySelector('.phase-columns'));
    this.body = /** @type {HTMLElement} */ (root.querySelector('tbody'));
    this.sentence = /** @type {HTMLElement} */ (root.querySelector('.phase-sentence'));
    this.caption = /** @type {HTMLElement} */ (root.querySelector('figcaption'));
    this.key = '';
    this.clear();
  }

  clear() {
    this.key = '';
    this.root.hidden = true;
  }

  /**
   * Draw the report's phases (none: hidden, with `why` said instead where given).
   * @param {any} report
   * @param {boolean} running
   */
  draw(report, running) {
    const phases = report?.phases;
    const gpu = report?.conditions?.backend === 'wgpu';
    if (!phases) {
      const why =
        report && !running && gpu
          ? "This GPU's phases are not timed: its adapter has no timestamp-query, and its calls return before the device runs them."
          : '';
      this.root.hidden = !why;
      if (why) {
        this.columns.replaceChildren();
        this.body.replaceChildren();
        setText(this.sentence, why);
      }
      return;
    }
    // A column arrives every 16 tokens; between them nothing here changes but the last column.
    const key = `${phases.windows.length}:${running ? phases.steps >> 4 : 'end'}`;
    this.root.hidden = false;
    if (key === this.key) return;
    this.key = key;
    setText(this.caption, gpu ? GPU_CAPTION : CPU_CAPTION);
    const tallest = Math.max(...phases.windows.map((/** @type {any} */ w) => w.step_ms), 1e-9);
    this.columns.replaceChildren(
      ...phases.windows.map((/** @type {any} */ w) => {
        const column = document.createElement('div');
        column.className = 'phase-column';
        column.style.height = `${(100 * w.step_ms) / tallest}%`;
        // The timed parts and the step they sit in, for tests and anyone inspecting the page.
        column.dataset.stepMs = String(w.step_ms);
        column.dataset.partsMs = String(
          w.projections_ms + w.attention_ms + w.norms_ms + w.classifier_ms + w.sampling_ms,
        );
        for (const [field, , colour] of PARTS) {
          const piece = document.createElement('div');
          piece.style.flexGrow = String(w[field]);
          piece.style.background = colour;
          column.append(piece);
        }
        return column;
      }),
    );
    const gap = phases.gap_ms ?? phases.decode.step_ms;
    // A GPU's norms and activations run inside its other dispatches (the caption says so).
    const rows = PARTS.filter(([field]) => !(gpu && field === 'norms_ms')).map(
      ([field, name, colour]) => [name, phases.decode[field], colour],
    );
    if (phases.between_ms !== null && phases.between_ms !== undefined)
      rows.push(['between steps (outside the engine)', Math.max(0, phases.between_ms), BETWEEN]);
    this.body.replaceChildren(
      ...rows.map(([name, ms, colour]) => {
        const tr = document.createElement('tr');
        tr.dataset.part = String(name);
        tr.dataset.ms = String(ms);
        tr.innerHTML = `<th scope="row"><span class="swatch" style="background:${colour}"></span></th><td></td><td></td>`;
        /** @type {HTMLElement} */ (tr.firstElementChild).append(String(name));
        /** @type {HTMLElement} */ (tr.children[1]).textContent = Number(ms).toFixed(3);
        /** @type {HTMLElement} */ (tr.children[2]).textContent =
          `${((100 * Number(ms)) / gap).toFixed(0)}%`;
        return tr;
      }),
    );
    setText(this.sentence, phases.sentence);
  }
}
