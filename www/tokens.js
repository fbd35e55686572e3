// @ts-check
// The token inspector: a run's prompt and output drawn token by token, each with its id, and for
// a generated token its probability, its rank and the likeliest alternatives at its step (the
// engine's own numbers, from its logits through the meter's events: the same `serve` returns as
// `logprobs`). Hover, focus or tap a token for its details; each token is also labelled for a
// screen reader. Live counts beside the rule of thumb: characters a token, tokens a word. It is
// drawn apart from the run's text and only while shown, a token appended at a time, so that a
// hidden inspector costs a run nothing.

const decoder = new TextDecoder();

/** A token's bytes as text (a byte token that is part of a character shows as such). */
const pieceText = (/** @type {number[]} */ bytes) => decoder.decode(new Uint8Array(bytes));

/** A probability from a natural-log probability, as a percent. */
const percent = (/** @type {number} */ logprob) => {
  const p = Math.exp(logprob) * 100;
  return p >= 10 ? `${p.toFixed(1)}%` : p >= 0.1 ? `${p.toFixed(2)}%` : `${p.toExponential(1)}%`;
};

/** What a token's text looks like in a label: spaces and newlines made visible. */
const shown = (/** @type {string} */ text) => JSON.stringify(text);

/**
 * @typedef {{ id: number, logprob: number, bytes: number[] }} Alternative
 * @typedef {{ logprob: number, rank: number, bytes: number[], top: Alternative[] }} Logprobs
 * @typedef {{ text: string, logprob: number, top?: { text: string, logprob: number }[] }} ChunkToken
 *   an endpoint's token, as its `logprobs` listed it: text, not ids
 * @typedef {{ id: number | null, text: string, logprobs: Logprobs | null, endpoint?: ChunkToken }} Shown
 */

export class TokenView {
  /**
   * @param {HTMLElement} root  where the inspector draws (hidden until shown)
   */
  constructor(root) {
    this.root = root;
    root.innerHTML = `
      <p class="note" data-testid="token-counts" role="status"></p>
      <div class="tokens" data-testid="token-view">
        <span class="prompt-tokens" aria-label="The prompt's tokens"></span><span class="output-tokens" aria-label="The generated tokens"></span>
      </div>
      <p class="token-details" data-testid="token-details" aria-live="polite">Hover, focus or tap a token to see its id, its probability and the likeliest tokens at its step.</p>`;
    this.counts = /** @type {HTMLElement} */ (root.querySelector('[data-testid=token-counts]'));
    this.promptBox = /** @type {HTMLElement} */ (root.querySelector('.prompt-tokens'));
    this.outputBox = /** @type {HTMLElement} */ (root.querySelector('.output-tokens'));
    this.details = /** @type {HTMLElement} */ (root.querySelector('[data-testid=token-details]'));
    const describe = (/** @type {Event} */ e) => {
      const span = /** @type {HTMLElement | null} */ (
        /** @type {HTMLElement} */ (e.target).closest?.('.tok')
      );
      if (span) this.details.textContent = span.getAttribute('aria-label');
    };
    root.addEventListener('mouseover', describe);
    root.addEventListener('focusin', describe);
    root.addEventListener('click', describe);
    this.clear();
  }

  clear() {
    /** @type {Shown[]} */
    this.output = [];
    this.promptCount = 0;
    this.chunks = false;
    this.endpointTokens = false;
    /** Why an endpoint's run has no probabilities (the engine's sentence), or null. */
    this.note = null;
    this.drawn = 0;
    this.words = 0;
    this.promptBox.replaceChildren();
    this.outputBox.replaceChildren();
    this.counts.textContent = '';
  }

  /**
   * The prompt's tokens (with the prefill event, when the run asked for log probabilities).
   * @param {{ id: number, bytes: number[] }[]} tokens
   */
  setPrompt(tokens) {
    this.promptCount = tokens.length;
    this.promptBox.replaceChildren(
      ...tokens.map((t, i) =>
        this.span(
          t.id,
          pieceText(t.bytes),
          `Prompt token ${i + 1} of ${tokens.length}: id ${t.id}, ${shown(pieceText(t.bytes))}`,
          null,
        ),
      ),
    );
  }

  /**
   * A generated token (`id` null: an endpoint's chunk, which carries no id).
   * @param {number | null} id
   * @param {string} text
   * @param {Logprobs | null} logprobs
   */
  add(id, text, logprobs) {
    if (id === null) this.chunks = true;
    this.output.push({ id, text, logprobs });
  }

  /**
   * An endpoint's chunk: each of its tokens where the server sent their log probabilities, else
   * the chunk as one mark (it may hold several tokens).
   * @param {string} text
   * @param {ChunkToken[] | undefined} tokens
   */
  addChunk(text, tokens) {
    if (!tokens?.length) {
      this.add(null, text, null);
      return;
    }
    this.endpointTokens = true;
    for (const token of tokens)
      this.output.push({ id: null, text: token.text, logprobs: null, endpoint: token });
  }

  /** @param {string} note  why an endpoint's run has no probabilities */
  setNote(note) {
    this.note = note;
  }

  /** @param {number} words  the output's words so far, by the meter's rule */
  setWords(words) {
    this.words = words;
  }

  /** Draw what came since the last drawing (appended: the tokens drawn stay). */
  draw() {
    const fresh = this.output.slice(this.drawn);
    if (fresh.length) {
      this.outputBox.append(...fresh.map((t, i) => this.outputSpan(t, this.drawn + i)));
      this.drawn = this.output.length;
    }
    const n = this.output.length;
    const text = this.output.map((t) => t.text).join('');
    const chars = [...text].length;
    const what = this.chunks ? 'chunks' : 'tokens';
    const perToken = n ? (chars / n).toFixed(1) : '–';
    const perWord = this.words ? (n / this.words).toFixed(2) : '–';
    const source = this.chunks
      ? `An endpoint's chunks: it sends no token ids, and ${this.note ?? 'its log probabilities were not asked for (Show tokens was off when it ran)'}, so each mark is a chunk (which may hold several tokens).`
      : this.endpointTokens
        ? "An endpoint's tokens, as its log probabilities listed them (an endpoint sends no ids)."
        : '';
    this.counts.textContent =
      `${this.promptCount ? `Prompt ${this.promptCount} tokens; ` : ''}output ${n} ${what}: ${perToken} characters a ${what === 'chunks' ? 'chunk' : 'token'}, ${perWord} ${what} a word (the rule of thumb for English: about 4 characters a token, 1.3 tokens a word). ${source}`.trim();
  }

  /**
   * @param {Shown} t
   * @param {number} i
   */
  outputSpan(t, i) {
    if (t.endpoint) return this.endpointSpan(t.endpoint, i);
    const visible = t.text || (t.logprobs ? pieceText(t.logprobs.bytes) : '');
    if (t.id === null) return this.span(null, visible, `Chunk ${i + 1}: ${shown(visible)}`, null);
    let label = `Output token ${i + 1}: id ${t.id}, ${shown(visible)}`;
    const l = t.logprobs;
    if (l) {
      const top = l.top.map((a) => `${shown(pieceText(a.bytes))} ${percent(a.logprob)}`).join(', ');
      label += `, probability ${percent(l.logprob)} (rank ${l.rank}); likeliest: ${top}`;
    } else {
      label += ' (no probabilities: on WebGPU a run keeps them only while Show tokens is on)';
    }
    return this.span(t.id, visible, label, l);
  }

  /**
   * An endpoint's token: its probability, and its rank where it is among the alternatives the
   * server listed.
   * @param {ChunkToken} t
   * @param {number} i
   */
  endpointSpan(t, i) {
    const top = t.top ?? [];
    const at = top.findIndex((a) => a.text === t.text);
    const rank = at >= 0 ? at + 1 : null;
    const ranked =
      rank !== null
        ? ` (rank ${rank})`
        : top.length
          ? ` (not among the ${top.length} likeliest the server listed)`
          : '';
    const likeliest = top.length
      ? `; likeliest: ${top.map((a) => `${shown(a.text)} ${percent(a.logprob)}`).join(', ')}`
      : '';
    const label = `Output token ${i + 1}: ${shown(t.text)}, probability ${percent(t.logprob)}${ranked}${likeliest}`;
    return this.span(null, t.text, label, { logprob: t.logprob, rank });
  }

  /**
   * @param {number | null} id
   * @param {string} text
   * @param {string} label
   * @param {{ logprob: number, rank: number | null } | null} logprobs  its rank null where
   *   unknown (an endpoint's token that is not among the alternatives it listed)
   */
  span(id, text, label, logprobs) {
    const span = document.createElement('span');
    span.className = 'tok';
    // A control that shows its details (on focus, hover or a tap), named by its label.
    span.setAttribute('role', 'button');
    span.tabIndex = 0;
    if (id !== null) span.dataset.tokenId = String(id);
    if (logprobs) {
      span.dataset.logprob = String(logprobs.logprob);
      if (logprobs.rank !== null) span.dataset.rank = String(logprobs.rank);
      // Less likely tokens are marked more strongly: what the model was unsure of stands out.
      span.style.setProperty('--doubt', String(Math.min(1, -logprobs.logprob / 4)));
    }
    span.setAttribute('aria-label', label);
    span.title = label;
    // Text nodes only: a model's output is never parsed as HTML.
    span.textContent = text;
    return span;
  }
}
