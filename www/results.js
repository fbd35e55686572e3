// @ts-check
// The results table: every finished run on this page (a single run, a lane, each run of a repeat,
// each level of the concurrency lab) is a row with its conditions and figures. Rows are kept in
// localStorage across reloads, sortable by any column, exportable as CSV and JSON, and clearable.
// The columns use the meter's own names; a row's figures are copied from the engine's report, never
// computed here.
import { refs } from './dom.js';

const STORAGE_KEY = 'tokenometer-results-v1';
// At most this many rows are kept (the oldest go first), so storage stays small.
const MAX_ROWS = 2000;

/** The columns, in order: CSV header, JSON keys and table headings. */
export const COLUMNS = [
  'time',
  'source',
  'model',
  'parameters',
  'quant',
  'weight_bytes',
  'backend',
  'adapter',
  'batch_size',
  'prompt_tokens',
  'output_tokens',
  'temperature',
  'top_p',
  'seed',
  'browser',
  'ttft_ms',
  'prefill_tps',
  'decode_tps',
  'itl_p99_ms',
  'words_per_s',
  'aggregate_tps',
  'stop_reason',
];
// The columns shown in the table (all are exported).
const SHOWN = [
  'time',
  'source',
  'model',
  'quant',
  'backend',
  'batch_size',
  'prompt_tokens',
  'output_tokens',
  'ttft_ms',
  'prefill_tps',
  'decode_tps',
  'itl_p99_ms',
  'words_per_s',
  'aggregate_tps',
];
const NUMERIC = new Set([
  'parameters',
  'weight_bytes',
  'batch_size',
  'prompt_tokens',
  'output_tokens',
  'temperature',
  'top_p',
  'seed',
  'ttft_ms',
  'prefill_tps',
  'decode_tps',
  'itl_p99_ms',
  'words_per_s',
  'aggregate_tps',
]);

/** The browser, in a few words (its brand and major version). */
function browserName() {
  const brands = /** @type {any} */ (navigator).userAgentData?.brands ?? [];
  const brand =
    brands.find((/** @type {any} */ b) => !/Not.A.Brand|Chromium/i.test(b.brand)) ?? brands[0];
  if (brand) return `${brand.brand} ${brand.version}`;
  const match = navigator.userAgent.match(/(Firefox|Edg|Chrome|Version)\/(\d+)/);
  return match
    ? `${match[1] === 'Version' ? 'Safari' : match[1]} ${match[2]}`
    : navigator.userAgent;
}

/**
 * A row from one run's report (crate/meter/mod.rs `Report`).
 * @param {any} report
 * @param {string} source  which part of the page ran it ("run", "lane 2", "repeat 3 of 5")
 */
export function rowFromReport(report, source) {
  const c = report.conditions;
  return {
    time: new Date().toISOString(),
    source,
    model: c.model,
    parameters: c.parameters,
    quant: c.quant,
    // An endpoint's run: the server decides its quantization and backend; its URL is the adapter.
    weight_bytes: c.weight_bytes,
    backend: c.backend ?? 'endpoint',
    adapter: c.adapter ?? c.endpoint,
    batch_size: c.batch_size,
    prompt_tokens: c.prompt_tokens,
    output_tokens: c.output_tokens,
    temperature: c.sampling.temperature,
    top_p: c.sampling.top_p,
    seed: c.sampling.seed,
    browser: browserName(),
    ttft_ms: report.ttft_ms,
    prefill_tps: report.prefill_tps,
    decode_tps: report.decode_tps,
    itl_p99_ms: report.inter_token_ms?.p99 ?? null,
    words_per_s: report.words_per_s,
    aggregate_tps: report.aggregate_tps,
    stop_reason: c.stop_reason,
  };
}

/**
 * A row from one level of the concurrency lab (crate/meter/mod.rs `LoadReport`): the batch is the
 * users, TTFT is the users' median, decode tok/s the median user's, ITL p99 across all users.
 * @param {any} report
 */
export function rowFromLoadReport(report) {
  const c = report.conditions;
  return {
    time: new Date().toISOString(),
    source: `lab, ${c.arrival} arrival`,
    model: c.model,
    parameters: c.parameters,
    quant: c.quant,
    weight_bytes: c.weight_bytes,
    backend: c.backend,
    adapter: c.adapter,
    batch_size: report.users,
    prompt_tokens: report.prompt_tokens,
    output_tokens: report.output_tokens,
    temperature: c.sampling.temperature,
    top_p: c.sampling.top_p,
    seed: c.sampling.seed,
    browser: browserName(),
    ttft_ms: report.ttft_ms_p50,
    prefill_tps: null,
    decode_tps: report.per_user_tps_p50,
    itl_p99_ms: report.itl_ms_p99,
    words_per_s: report.per_user_words_per_s_p50,
    aggregate_tps: report.aggregate_tps,
    stop_reason: null,
  };
}

/**
 * One CSV field (RFC 4180: quoted when it holds a comma, a quote or a line break).
 * @param {unknown} value
 */
function csvField(value) {
  const text = value === null || value === undefined ? '' : String(value);
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** @param {any[]} rows */
export function toCsv(rows) {
  return (
    [COLUMNS.join(','), ...rows.map((row) => COLUMNS.map((c) => csvField(row[c])).join(','))].join(
      '\r\n',
    ) + '\r\n'
  );
}

export class ResultsTable {
  /** @param {HTMLElement} root */
  constructor(root) {
    root.innerHTML = `
      <h2>Results <small>every finished run on this page, kept in this browser</small></h2>
      <div class="row">
        <button type="button" data-testid="export-csv" data-ref="csv">Export CSV</button>
        <button type="button" data-testid="export-json" data-ref="json">Export JSON</button>
        <button type="button" data-testid="clear-results" data-ref="clear">Clear results</button>
        <span data-ref="count" aria-live="polite"></span>
      </div>
      <div class="table-scroll">
        <table data-testid="results">
          <caption class="visually-hidden">Results: one row per finished run; a column's button sorts by it</caption>
          <thead><tr data-ref="head"></tr></thead>
          <tbody data-ref="body"></tbody>
        </table>
      </div>`;
    /** @type {Record<string, any>} */
    this.ref = refs(root);
    /** @type {any[]} */
    this.rows = this.loadRows();
    this.sort = { column: 'time', descending: true };
    for (const column of SHOWN) {
      const th = document.createElement('th');
      th.scope = 'col';
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'sort';
      button.textContent = column;
      button.addEventListener('click', () => this.sortBy(column));
      th.append(button);
      this.ref.head.append(th);
    }
    this.ref.csv.addEventListener('click', () =>
      this.download('tokenometer-results.csv', 'text/csv', toCsv(this.rows)),
    );
    this.ref.json.addEventListener('click', () =>
      this.download(
        'tokenometer-results.json',
        'application/json',
        JSON.stringify(this.rows, null, 2),
      ),
    );
    this.ref.clear.addEventListener('click', () => this.clear());
    this.render();
  }

  /** @returns {any[]} */
  loadRows() {
    try {
      const rows = JSON.parse(localStorage.getItem(STORAGE_KEY) ?? '[]');
      return Array.isArray(rows) ? rows : [];
    } catch {
      return [];
    }
  }

  save() {
    try {
      localStorage.setItem(STORAGE_KEY, JSON.stringify(this.rows));
    } catch {
      // Storage full or refused (a private window): the table still holds this visit's rows.
    }
  }

  /** @param {any} row */
  add(row) {
    this.rows.push(row);
    if (this.rows.length > MAX_ROWS) this.rows.splice(0, this.rows.length - MAX_ROWS);
    this.save();
    this.render();
  }

  clear() {
    this.rows = [];
    this.save();
    this.render();
  }

  /** @param {string} column */
  sortBy(column) {
    this.sort = {
      column,
      descending: this.sort.column === column ? !this.sort.descending : NUMERIC.has(column),
    };
    this.render();
  }

  render() {
    const { column, descending } = this.sort;
    const numeric = NUMERIC.has(column);
    const key = (/** @type {any} */ row) =>
      numeric ? (row[column] ?? -Infinity) : String(row[column] ?? '');
    const sorted = [...this.rows].sort((a, b) => {
      const [x, y] = [key(a), key(b)];
      const order = x < y ? -1 : x > y ? 1 : 0;
      return descending ? -order : order;
    });
    for (const th of this.ref.head.children) {
      const name = th.textContent;
      th.setAttribute(
        'aria-sort',
        name === column ? (descending ? 'descending' : 'ascending') : 'none',
      );
    }
    this.ref.body.replaceChildren(
      ...sorted.map((row) => {
        const tr = document.createElement('tr');
        tr.dataset.testid = 'result-row';
        for (const c of SHOWN) {
          const td = document.createElement('td');
          const value = row[c];
          td.textContent =
            value === null || value === undefined
              ? '–'
              : c === 'time'
                ? new Date(value).toLocaleTimeString()
                : typeof value === 'number' && !Number.isInteger(value)
                  ? value.toFixed(1)
                  : String(value);
          tr.append(td);
        }
        tr.title = `${row.model} · ${row.quant} · ${row.backend} (${row.adapter}) · ${row.browser}`;
        return tr;
      }),
    );
    this.ref.count.textContent = `${this.rows.length} run${this.rows.length === 1 ? '' : 's'}`;
  }

  /**
   * @param {string} name
   * @param {string} type
   * @param {string} content
   */
  download(name, type, content) {
    const url = URL.createObjectURL(new Blob([content], { type }));
    const a = document.createElement('a');
    a.href = url;
    a.download = name;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }
}
