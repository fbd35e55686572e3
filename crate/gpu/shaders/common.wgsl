// What every kernel shares: the pass's description (`Step`), a matrix's description, how a block of weights
// is read in each stored form, and the workgroup reductions. Each kernel file is this, after the
// model's constants (DIM, HS, ... : `gpu/shaders.rs` writes them), and before the kernel itself.

const WG: u32 = 256u;
// Rows a projection's unit takes at once, each weight it reads serving all of them.
const ROWS: u32 = 4u;
// A projection's workgroup: COLS output columns by SLICES slices of the inner dimension.
const COLS: u32 = 64u;
const SLICES: u32 = 4u;
const NONE: u32 = 0xffffffffu;

// The stored forms (`gpu/layer.rs` writes them), each a block of 32 values with an f32 scale
// and, where the type has minimums, an f32 offset: value i = code_i * scale + offset.
const F32: u32 = 0u;
const Q8: u32 = 1u;
const Q4: u32 = 2u;
const Q5: u32 = 3u;
const Q6: u32 = 4u;

struct Step {
    rows: u32,
    spans: u32,
    // Positions a sequence's slot of the KV pool holds, and where the values follow the keys.
    positions: u32,
    values_at: u32,
    // The classifier's rows, where they go in the logits, and whether they are every row.
    logit_rows: u32,
    logits_first: u32,
    all_rows: u32,
    // Where the local layers' angles start (0: none).
    local_at: u32,
    // Each span: its slot, first position, first row, rows.
    span: array<vec4<u32>, MAX_SPANS>,
}

// A layer's (or the classifier's) description, written once at load: 7 matrices (q, k, v, o,
// gate, down, up) of two vec4 each, then the vectors' word offsets.
struct Desc {
    m: array<vec4<u32>, 14>,
    v: array<vec4<u32>, 3>,
}

const WQ: u32 = 0u;
const WK: u32 = 1u;
const WV: u32 = 2u;
const WO: u32 = 3u;
const W1: u32 = 4u;
const W2: u32 = 5u;
const W3: u32 = 6u;

// Vector slots of `Desc.v` (x, y, z, w of v[0], then v[1], v[2]).
const ATT_NORM: u32 = 0u;
const FFN_NORM: u32 = 1u;
const BQ: u32 = 2u;
const BK: u32 = 3u;
const BV: u32 = 4u;
const QN: u32 = 5u;
const KN: u32 = 6u;
const POST_ATT: u32 = 7u;
const POST_FFN: u32 = 8u;
// Not a vector: the layer's attention window (0: every earlier position) in v[2].z, and
// whether it rotates by the local angles in v[2].w.

struct Mat {
    fmt: u32,
    codes: u32,
    scales: u32,
    offsets: u32,
    // Output columns (rows of the stored matrix) and inputs.
    n: u32,
    k: u32,
    // The first output column this part holds (the classifier's parts).
    col0: u32,
}

fn mat(i: u32) -> Mat {
    let a = desc.m[2u * i];
    let b = desc.m[2u * i + 1u];
    return Mat(a.x, a.y, a.z, a.w, b.x, b.y, b.z);
}

fn vec_at(slot: u32) -> u32 {
    return desc.v[slot / 4u][slot % 4u];
}

// Value `i` of the vector in `slot` (a norm's weight, a bias).
fn vec_value(slot: u32, i: u32) -> f32 {
    return bitcast<f32>(wts[vec_at(slot) + i]);
}

fn words_a_block(fmt: u32) -> u32 {
    switch fmt {
        case 1u: { return 8u; }
        case 2u: { return 4u; }
        case 3u: { return 5u; }
        case 4u: { return 7u; }
        default: { return 32u; }
    }
}

// Byte `b` of `word` as a signed value.
fn signed_byte(word: u32, b: u32) -> f32 {
    return f32(bitcast<i32>(word << (24u - 8u * b)) >> 24u);
}

// The 32 weights of block `b` (inputs 32 b..) of output column `j`: stored words lie by column,
// word `w` of a block at `(block words * b + w) * n + j`, so that neighbouring units read
// neighbouring words; F32 holds the values themselves, one word each (0 past `k`).
fn block_weights(m: Mat, j: u32, b: u32, w: ptr<function, array<f32, 32>>) {
    let n = m.n;
    if m.fmt == F32 {
        for (var i = 0u; i < 32u; i++) {
            let c = 32u * b + i;
            (*w)[i] = select(0.0, bitcast<f32>(wts[m.codes + min(c, m.k - 1u) * n + j]), c < m.k);
        }
        return;
    }
    let base = m.codes + words_a_block(m.fmt) * b * n + j;
    let scale = bitcast<f32>(wts[m.scales + b * n + j]);
    var offset = 0.0;
    if m.offsets != NONE {
        offset = bitcast<f32>(wts[m.offsets + b * n + j]);
    }
    switch m.fmt {
        case 1u: {
            // Q8: 32 signed bytes.
            for (var wi = 0u; wi < 8u; wi++) {
                let word = wts[base + wi * n];
                for (var bi = 0u; bi < 4u; bi++) {
                    (*w)[4u * wi + bi] = signed_byte(word, bi) * scale + offset;
                }
            }
        }
        case 2u, 3u: {
            // Q4: byte j of 16 holds value j (low nibble) and j + 16 (high), each value + 8.
            // Q5: the same nibbles and a word of fifth bits (bit i for value i), each value + 16.
            var high = 0u;
            var bias = 8.0;
            if m.fmt == Q5 {
                high = wts[base + 4u * n];
                bias = 16.0;
            }
            for (var wi = 0u; wi < 4u; wi++) {
                let word = wts[base + wi * n];
                for (var bi = 0u; bi < 4u; bi++) {
                    let i = 4u * wi + bi;
                    let byte = (word >> (8u * bi)) & 0xffu;
                    let lo = (byte & 0xfu) | (((high >> i) & 1u) << 4u);
                    let hi = (byte >> 4u) | (((high >> (i + 16u)) & 1u) << 4u);
                    (*w)[i] = (f32(lo) - bias) * scale + offset;
                    (*w)[i + 16u] = (f32(hi) - bias) * scale + offset;
                }
            }
        }
        default: {
            // Q6: Q4's nibbles, two words of the values' top two bits (value i at bits 2i of the
            // first for i < 16, of the second after), and a word of the two 16-value scales;
            // each value + 32.
            let top0 = wts[base + 4u * n];
            let top1 = wts[base + 5u * n];
            let scales = wts[base + 6u * n];
            let s0 = signed_byte(scales, 0u) * scale;
            let s1 = signed_byte(scales, 1u) * scale;
            for (var wi = 0u; wi < 4u; wi++) {
                let word = wts[base + wi * n];
                for (var bi = 0u; bi < 4u; bi++) {
                    let i = 4u * wi + bi;
                    let byte = (word >> (8u * bi)) & 0xffu;
                    let lo = (byte & 0xfu) | (((top0 >> (2u * i)) & 3u) << 4u);
                    let hi = (byte >> 4u) | (((top1 >> (2u * i)) & 3u) << 4u);
                    (*w)[i] = (f32(lo) - 32.0) * s0 + offset;
                    (*w)[i + 16u] = (f32(hi) - 32.0) * s1 + offset;
                }
            }
        }
    }
}

// Blocks `b0..b1` of output column `j` times each of the tile's first `nr` rows (`x_value`, which
// each kernel defines), added to `acc`.
fn dot_tile(m: Mat, j: u32, b0: u32, b1: u32, nr: u32, acc: ptr<function, array<f32, ROWS>>) {
    var w: array<f32, 32>;
    for (var b = b0; b < b1; b++) {
        block_weights(m, j, b, &w);
        let first = 32u * b;
        let count = min(32u, m.k - first);
        for (var r = 0u; r < ROWS; r++) {
            if r < nr {
                // Four values an iteration (a GPU's loads and multiply-adds in fours; and fewer
                // iterations, which lavapipe counts: `gpu/ops.rs`, `pass_rows`).
                var s = 0.0;
                var i = 0u;
                for (; i + 4u <= count; i += 4u) {
                    let a = vec4<f32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]);
                    let x4 = vec4<f32>(x_value(r, first + i), x_value(r, first + i + 1u),
                                       x_value(r, first + i + 2u), x_value(r, first + i + 3u));
                    s += dot(a, x4);
                }
                for (; i < count; i++) {
                    s += w[i] * x_value(r, first + i);
                }
                (*acc)[r] += s;
            }
        }
    }
}

var<workgroup> red: array<f32, WG>;
var<workgroup> red16: array<f32, 16>;

// The sum of every unit's `v` (from uniform control flow: every unit must call it). Three
// barriers, not a tree's ten: 16 units each add 16 values, then every unit adds those 16. On
// lavapipe, where a barrier switches between the workgroup's fibres, this and the four-row norm
// (`sum_all4`) took SmolLM2's shape (2 layers) from 4.3 to 4.8 decode tok/s (2 interleaved
// rounds); stories260K did not move beyond noise.
fn sum_all(v: f32, tid: u32) -> f32 {
    red[tid] = v;
    workgroupBarrier();
    if tid < 16u {
        var s = 0.0;
        for (var i = 0u; i < 16u; i++) {
            s += red[tid * 16u + i];
        }
        red16[tid] = s;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < 16u; i++) {
        total += red16[i];
    }
    workgroupBarrier();
    return total;
}

// The largest of every unit's `v` (as `sum_all`).
fn max_all(v: f32, tid: u32) -> f32 {
    red[tid] = v;
    workgroupBarrier();
    if tid < 16u {
        var m = red[tid * 16u];
        for (var i = 1u; i < 16u; i++) {
            m = max(m, red[tid * 16u + i]);
        }
        red16[tid] = m;
    }
    workgroupBarrier();
    var top = red16[0];
    for (var i = 1u; i < 16u; i++) {
        top = max(top, red16[i]);
    }
    workgroupBarrier();
    return top;
}

var<workgroup> red4: array<vec4<f32>, WG>;
var<workgroup> red4_16: array<vec4<f32>, 16>;

// `sum_all` of four values at once (a tile's rows).
fn sum_all4(v: vec4<f32>, tid: u32) -> vec4<f32> {
    red4[tid] = v;
    workgroupBarrier();
    if tid < 16u {
        var s = vec4<f32>(0.0);
        for (var i = 0u; i < 16u; i++) {
            s += red4[tid * 16u + i];
        }
        red4_16[tid] = s;
    }
    workgroupBarrier();
    var total = vec4<f32>(0.0);
    for (var i = 0u; i < 16u; i++) {
        total += red4_16[i];
    }
    workgroupBarrier();
    return total;
}

// 1 / sqrt(mean square + EPS), as the CPU computes it.
fn inv_rms(sum_squares: f32, width: u32) -> f32 {
    return 1.0 / sqrt(sum_squares / f32(width) + EPS);
}

// The columns of this projection workgroup's slice of a `k`-wide input: blocks `b0..b1`.
fn slice_blocks(k: u32, slice: u32) -> vec2<u32> {
    let blocks = (k + 31u) / 32u;
    let each = (blocks + SLICES - 1u) / SLICES;
    return vec2<u32>(min(slice * each, blocks), min((slice + 1u) * each, blocks));
}

var<workgroup> parts: array<f32, 1024>;

// The projection units' sums over their slices, for the tile's rows: unit (c, 0) gets column c's.
// `acc` is each unit's own; call from uniform control flow.
fn sum_slices(acc: ptr<function, array<f32, ROWS>>, c: u32, slice: u32) -> array<f32, ROWS> {
    for (var r = 0u; r < ROWS; r++) {
        parts[(slice * COLS + c) * ROWS + r] = (*acc)[r];
    }
    workgroupBarrier();
    var total: array<f32, ROWS>;
    for (var r = 0u; r < ROWS; r++) {
        for (var s = 0u; s < SLICES; s++) {
            total[r] += parts[(s * COLS + c) * ROWS + r];
        }
    }
    workgroupBarrier();
    return total;
}
