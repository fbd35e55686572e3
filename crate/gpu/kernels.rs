//! The wgpu backend's kernels themselves, in CubeCL: a cube's reduction, RMSNorm, RoPE, the KV
//! cache's store, SwiGLU and GEGLU, attention and the projections (f32, and Q8_0 / Q4_0 blocks as
//! stored). `launch.rs` launches them on burn's tensors.

use cubecl::prelude::*;

/// The sum (or, with `largest`, the maximum) of every unit's `value` over the cube, by halving in
/// shared memory (`scratch`, one slot per unit). Every unit gets the result.
#[cube]
pub(crate) fn cube_reduce(
    value: f32,
    scratch: &mut Shared<[f32]>,
    #[comptime] largest: bool,
) -> f32 {
    let unit = UNIT_POS as usize;
    scratch[unit] = value;
    sync_cube();
    let mut stride = (CUBE_DIM / 2) as usize;
    while stride > 0 {
        if unit < stride {
            let other = scratch[unit + stride];
            if largest {
                scratch[unit] = max(scratch[unit], other);
            } else {
                scratch[unit] += other;
            }
        }
        sync_cube();
        stride /= 2;
    }
    let result = scratch[0];
    sync_cube();
    result
}

/// One cube per row (`rows` of them; spare cubes write nothing): the sum of squares over the
/// cube, then every element scaled.
#[cube(launch)]
pub(crate) fn rms_norm_kernel(
    x: &Tensor<f32>,
    weight: &Tensor<f32>,
    out: &mut Tensor<f32>,
    rows: u32,
    eps: f32,
    dim_f32: f32,
    #[comptime] dim: usize,
    #[comptime] units: usize,
) {
    let mut scratch = Shared::<[f32]>::new_slice(units);
    let valid = CUBE_POS < rows as usize;
    let base = min(CUBE_POS, rows as usize - 1) * dim;
    let unit = UNIT_POS as usize;
    let mut squares = 0.0f32.runtime();
    for i in range_stepped(unit, dim, units) {
        let v = x[base + i];
        squares += v * v;
    }
    let total = cube_reduce(squares, &mut scratch, false);
    let inv_rms = 1.0f32 / (total / dim_f32 + eps).sqrt();
    if valid {
        for i in range_stepped(unit, dim, units) {
            out[base + i] = x[base + i] * inv_rms * weight[i];
        }
    }
}

/// Pair `p` of `x` `[rows, width]` (pairs `(2i, 2i + 1)` of each head) rotated by its row's
/// angle `i`, into `out`.
#[cube]
pub(crate) fn rotate_pair(
    x: &Tensor<f32>,
    cos: &Tensor<f32>,
    sin: &Tensor<f32>,
    out: &mut Tensor<f32>,
    p: usize,
    #[comptime] width: usize,
    #[comptime] half: usize,
) {
    let per_row = width / 2;
    let row = p / per_row;
    let pair = p % per_row;
    let angle = row * half + pair % half;
    let (c, s) = (cos[angle], sin[angle]);
    let at = row * width + 2 * pair;
    let (even, odd) = (x[at], x[at + 1]);
    out[at] = even * c - odd * s;
    out[at + 1] = even * s + odd * c;
}

/// One unit per pair of `q` (`q_pairs` of them), then per pair of `k` (`k_pairs`): RoPE on the
/// queries and the keys in one dispatch.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn rope_kernel(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    cos: &Tensor<f32>,
    sin: &Tensor<f32>,
    q_out: &mut Tensor<f32>,
    k_out: &mut Tensor<f32>,
    q_pairs: u32,
    k_pairs: u32,
    #[comptime] q_width: usize,
    #[comptime] k_width: usize,
    #[comptime] half: usize,
) {
    let p = ABSOLUTE_POS;
    if p < q_pairs as usize {
        rotate_pair(q, cos, sin, q_out, p, q_width, half);
    } else if p < (q_pairs + k_pairs) as usize {
        rotate_pair(k, cos, sin, k_out, p - q_pairs as usize, k_width, half);
    }
}

/// One unit per element of `k` and `v` `[t, n_kv_heads * head_size]` (`n` of them): stored at
/// positions `start..start + t` of the caches `keys` and `values` `[n_kv_heads, capacity,
/// head_size]`, in place.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn store_kernel(
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    keys: &mut Tensor<f32>,
    values: &mut Tensor<f32>,
    n: u32,
    start: u32,
    capacity: u32,
    #[comptime] width: usize,
    #[comptime] head_size: usize,
) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        let row = i / width;
        let head = (i % width) / head_size;
        let at = (head * capacity as usize + start as usize + row) * head_size + i % head_size;
        keys[at] = k[i];
        values[at] = v[i];
    }
}

/// One unit per element: `gate * sigmoid(gate) * up`, as llama2.c computes it, or with `gelu`
/// `gelu(gate) * up`, GELU in its tanh form (Gemma; as llama.cpp's GPU backends compute it).
#[cube(launch)]
pub(crate) fn gated_kernel(
    gate: &Tensor<f32>,
    up: &Tensor<f32>,
    out: &mut Tensor<f32>,
    n: u32,
    #[comptime] gelu: bool,
) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        let g = gate[i];
        if gelu {
            let inner = ((g + g * g * g * 0.044715f32) * 0.797_884_6f32).tanh();
            out[i] = g * 0.5f32 * (inner + 1.0f32) * up[i];
        } else {
            out[i] = g * (1.0f32 / (1.0f32 + (-g).exp())) * up[i];
        }
    }
}

/// One cube per (query row, head) of one sequence's `rows / n_heads` rows, rows `row0..` of `q`
/// and of `out` (a batch's rows, each sequence attending in its own dispatch into one output):
/// scores over the keys the row may see (positions up to its own), their softmax, and the
/// weighted sum of the values, in chunks of `KEY_CHUNK` keys (`launch.rs`) with
/// the running maximum and sum rescaled from chunk to chunk. Each unit owns a fixed set of the
/// output's dimensions, so it alone reads and writes them between chunks.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_kernel(
    q: &Tensor<f32>,
    keys: &Tensor<f32>,
    values: &Tensor<f32>,
    out: &mut Tensor<f32>,
    rows: u32,
    row0: u32,
    start: u32,
    window: u32,
    capacity: u32,
    scale: f32,
    #[comptime] n_heads: usize,
    #[comptime] rep: usize,
    #[comptime] head_size: usize,
    #[comptime] key_chunk: usize,
    #[comptime] units: usize,
) {
    let mut scores = Shared::<[f32]>::new_slice(key_chunk);
    let mut scratch = Shared::<[f32]>::new_slice(units);
    let valid = CUBE_POS < rows as usize;
    let cube = min(CUBE_POS, rows as usize - 1);
    let row = cube / n_heads;
    let head = cube % n_heads;
    let kv_base = (head / rep) * capacity as usize * head_size;
    let q_base = (row0 as usize + row) * n_heads * head_size + head * head_size;
    let seen = start as usize + row + 1;
    // With a window (not 0), only its last `window` positions.
    let mut first = 0usize.runtime();
    if window > 0 && seen > window as usize {
        first = seen - window as usize;
    }
    let unit = UNIT_POS as usize;

    let mut running_max = (-3.0e38f32).runtime();
    let mut running_sum = 0.0f32.runtime();
    let mut chunk = first;
    while chunk < seen {
        let n = min(key_chunk, seen - chunk);
        let mut local_max = (-3.0e38f32).runtime();
        for j in range_stepped(unit, n, units) {
            let k_at = kv_base + (chunk + j) * head_size;
            let mut dot = 0.0f32.runtime();
            for d in 0..head_size {
                dot += q[q_base + d] * keys[k_at + d];
            }
            let score = dot * scale;
            scores[j] = score;
            local_max = max(local_max, score);
        }
        let chunk_max = cube_reduce(local_max, &mut scratch, true);
        let new_max = max(running_max, chunk_max);
        let mut local_sum = 0.0f32.runtime();
        for j in range_stepped(unit, n, units) {
            let e = (scores[j] - new_max).exp();
            scores[j] = e;
            local_sum += e;
        }
        let chunk_sum = cube_reduce(local_sum, &mut scratch, false);
        let correction = (running_max - new_max).exp();
        running_sum = running_sum * correction + chunk_sum;
        if valid {
            for d in range_stepped(unit, head_size, units) {
                let mut acc = 0.0f32.runtime();
                if chunk > first {
                    acc = out[q_base + d] * correction;
                }
                for j in 0..n {
                    acc += scores[j] * values[kv_base + (chunk + j) * head_size + d];
                }
                out[q_base + d] = acc;
            }
        }
        running_max = new_max;
        sync_cube();
        chunk += key_chunk;
    }
    if valid {
        for d in range_stepped(unit, head_size, units) {
            out[q_base + d] /= running_sum;
        }
    }
}

/// The first output column and row of `x` a projection's unit computes, and whether its cube is
/// a real one (spare cubes past the last tile compute on the last and write nothing). A unit owns
/// `span` columns, `cols` apart, so that a cube's units read adjacent words at each step.
#[cube]
pub(crate) fn linear_unit(
    m: u32,
    n: u32,
    #[comptime] tile: usize,
    #[comptime] cols: usize,
    #[comptime] span: usize,
) -> (usize, usize, bool) {
    let groups = (n as usize).div_ceil(cols * span);
    let cubes = groups * (m as usize).div_ceil(tile);
    let cube = min(CUBE_POS, cubes - 1);
    let col = (cube % groups) * cols * span + UNIT_POS_X as usize;
    (col, (cube / groups) * tile, CUBE_POS < cubes)
}

/// Column `c` of a unit whose first is `col`, clamped to the last (whose reads are then wasted,
/// and [`linear_finish()`] does not write them).
#[cube]
pub(crate) fn unit_col(col: usize, c: usize, n: u32, #[comptime] cols: usize) -> usize {
    min(col + c * cols, n as usize - 1)
}

/// Add up the `slices` partial sums of each output (one barrier), and write rows `first..` of
/// the unit's columns; with `with_residual`, each plus `residual`'s element at the same place.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn linear_finish(
    acc: &Array<f32>,
    residual: &Tensor<f32>,
    out: &mut Tensor<f32>,
    first: usize,
    col: usize,
    m: u32,
    n: u32,
    valid: bool,
    #[comptime] tile: usize,
    #[comptime] cols: usize,
    #[comptime] slices: usize,
    #[comptime] span: usize,
    #[comptime] with_residual: bool,
) {
    let mut scratch = Shared::<[f32]>::new_slice(cols * slices * tile * span);
    let (ux, uy) = (UNIT_POS_X as usize, UNIT_POS_Y as usize);
    #[unroll]
    for a in 0..tile * span {
        scratch[(uy * tile * span + a) * cols + ux] = acc[a];
    }
    sync_cube();
    if valid && uy == 0 {
        #[unroll]
        for c in 0..span {
            #[unroll]
            for r in 0..tile {
                let column = col + c * cols;
                if first + r < m as usize && column < n as usize {
                    let mut sum = 0.0f32.runtime();
                    #[unroll]
                    for s in 0..slices {
                        sum += scratch[((s * tile * span) + c * tile + r) * cols + ux];
                    }
                    let at = (first + r) * n as usize + column;
                    if with_residual {
                        sum += residual[at];
                    }
                    out[at] = sum;
                }
            }
        }
    }
}

/// The value of `x`'s row `first + r`, column `i`; past the last row, the last row's (whose sums
/// [`linear_finish()`] does not write). A clamp, not a branch, in the inner loop.
#[cube]
pub(crate) fn x_at(
    x: &Tensor<f32>,
    first: usize,
    r: usize,
    i: usize,
    m: u32,
    #[comptime] k: usize,
) -> f32 {
    x[min(first + r, m as usize - 1) * k + i]
}

/// A cube is `cols` x `span` output columns by `slices` slices of `k`: each unit walks its slice of
/// its columns' weights (each read once for the whole tile of rows, each value of `x` once for all
/// `span` columns), and the slices meet in [`linear_finish()`]. `w` is `[k, n]`, so the units of a
/// slice read adjacent words. With `with_residual`, `residual` `[m, n]` is added to the result.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn linear_f32_kernel(
    x: &Tensor<f32>,
    w: &Tensor<f32>,
    residual: &Tensor<f32>,
    out: &mut Tensor<f32>,
    #[comptime] k: usize,
    #[comptime] tile: usize,
    #[comptime] cols: usize,
    #[comptime] slices: usize,
    #[comptime] span: usize,
    #[comptime] with_residual: bool,
) {
    let (m, n) = (x.shape(0) as u32, out.shape(1) as u32);
    let mut acc = Array::<f32>::new(tile * span);
    let mut xs = Array::<f32>::new(tile);
    let (col, first, valid) = linear_unit(m, n, tile, cols, span);
    for i in range_stepped(UNIT_POS_Y as usize, k, slices) {
        #[unroll]
        for r in 0..tile {
            xs[r] = x_at(x, first, r, i, m, k);
        }
        #[unroll]
        for c in 0..span {
            let wv = w[i * n as usize + unit_col(col, c, n, cols)];
            #[unroll]
            for r in 0..tile {
                acc[c * tile + r] += wv * xs[r];
            }
        }
    }
    linear_finish(
        &acc,
        residual,
        out,
        first,
        col,
        m,
        n,
        valid,
        tile,
        cols,
        slices,
        span,
        with_residual,
    );
}

/// The column of `k` that value `j` of word `wi` (of a row's words) holds.
#[cube]
pub(crate) fn block_column(wi: usize, #[comptime] j: usize, #[comptime] bits: usize) -> usize {
    let mut column = wi * 4 + j;
    if bits == 4 {
        // Q4_0: word `i` (0..4) of a block holds values `4i..4i + 4` in its low nibbles and
        // `16 + 4i..` in its high ones.
        column = (wi / 4) * 32 + (wi % 4) * 4 + j % 4 + (j / 4) * 16;
    }
    column
}

/// Value `j` of `word` (see [`block_column()`]), without its bias.
#[cube]
pub(crate) fn block_value(word: u32, #[comptime] j: usize, #[comptime] bits: usize) -> f32 {
    let byte = (word >> (8 * (j % 4)) as u32) & 255u32;
    let mut value = f32::cast_from(byte) - 128.0;
    if bits == 4 {
        value = f32::cast_from((byte >> (4 * (j / 4)) as u32) & 15u32) - 8.0;
    }
    value
}

/// As [`linear_f32_kernel()`], over Q8_0 or Q4_0 blocks (`bits` 8 or 4; see
/// [`FusedOps::linear_blocks`](crate::gpu::launch::FusedOps::linear_blocks)): each unit takes whole words, and scales each word's dot product
/// by its block's scale. With `with_offsets`, each word also adds its block's offset times the sum
/// of the word's values of `x` (over a block's words, the offset times the block's sum).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn linear_blocks_kernel(
    x: &Tensor<f32>,
    quants: &Tensor<u32>,
    scales: &Tensor<f32>,
    offsets: &Tensor<f32>,
    residual: &Tensor<f32>,
    out: &mut Tensor<f32>,
    #[comptime] k: usize,
    #[comptime] tile: usize,
    #[comptime] cols: usize,
    #[comptime] slices: usize,
    #[comptime] span: usize,
    #[comptime] bits: usize,
    #[comptime] with_offsets: bool,
    #[comptime] with_residual: bool,
) {
    let per_word = 32 / bits;
    let (m, n) = (x.shape(0) as u32, out.shape(1) as u32);
    let mut acc = Array::<f32>::new(tile * span);
    let mut xs = Array::<f32>::new(tile * per_word);
    let (col, first, valid) = linear_unit(m, n, tile, cols, span);
    for wi in range_stepped(UNIT_POS_Y as usize, k / per_word, slices) {
        #[unroll]
        for r in 0..tile {
            #[unroll]
            for j in 0..per_word {
                xs[r * per_word + j] = x_at(x, first, r, block_column(wi, j, bits), m, k);
            }
        }
        let mut sums = Array::<f32>::new(tile);
        if with_offsets {
            #[unroll]
            for r in 0..tile {
                let mut sum = 0.0f32.runtime();
                #[unroll]
                for j in 0..per_word {
                    sum += xs[r * per_word + j];
                }
                sums[r] = sum;
            }
        }
        #[unroll]
        for c in 0..span {
            let column = unit_col(col, c, n, cols);
            let word = quants[wi * n as usize + column];
            let block = (wi * per_word / 32) * n as usize + column;
            let scale = scales[block];
            let mut q = Array::<f32>::new(per_word);
            #[unroll]
            for j in 0..per_word {
                q[j] = block_value(word, j, bits);
            }
            #[unroll]
            for r in 0..tile {
                let mut dot = 0.0f32.runtime();
                #[unroll]
                for j in 0..per_word {
                    dot += q[j] * xs[r * per_word + j];
                }
                acc[c * tile + r] += scale * dot;
            }
            if with_offsets {
                let offset = offsets[block];
                #[unroll]
                for r in 0..tile {
                    acc[c * tile + r] += offset * sums[r];
                }
            }
        }
    }
    linear_finish(
        &acc,
        residual,
        out,
        first,
        col,
        m,
        n,
        valid,
        tile,
        cols,
        slices,
        span,
        with_residual,
    );
}
