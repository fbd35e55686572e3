// A layer's attention, up to its output projection (`forward::attention_half` to `attention`),
// in one dispatch: one workgroup per query head and span. For each of the span's rows it norms
// x, projects to its head's q and to the k and v of the head's KV group (plus biases, each head
// normed where the recipe says), rotates q and k, stores k and v in the sequence's slot of the
// KV pool, then attends over the slot's positions (the window's, on a local layer). The heads of a
// KV group compute the same k and v and store the same bits.

@group(0) @binding(0) var<storage, read> step: Step;
@group(0) @binding(1) var<storage, read> desc: Desc;
@group(0) @binding(2) var<storage, read> wts: array<u32>;
// RoPE's cos then sin `[rows, HS / 2]`, then the local base's the same way at `step.local_at`.
@group(0) @binding(3) var<storage, read> angles: array<f32>;
@group(0) @binding(4) var<storage, read> x: array<f32>;
// This head's q, k and v of each row, `[rows, N_HEADS, 3, HS]`.
@group(0) @binding(5) var<storage, read_write> qkv: array<f32>;
// Keys `[slots, positions, KV_DIM]`, then values the same way at `step.values_at`.
@group(0) @binding(6) var<storage, read_write> kv: array<f32>;
// Attention's output `[rows, Q_DIM]`.
@group(0) @binding(7) var<storage, read_write> att: array<f32>;

const KEY_CHUNK: u32 = 1024u;
// Units a dimension of the values is summed over (HS divides WG: head sizes are powers of two).
const PARTS: u32 = WG / HS;

var<workgroup> partial: array<f32, WG>;

var<workgroup> inv: array<f32, MAX_PASS_ROWS>;
var<workgroup> scores: array<f32, KEY_CHUNK>;
var<workgroup> head_q: array<f32, HS>;
var<workgroup> head_k: array<f32, HS>;

var<private> tile: array<u32, ROWS>;
var<private> first_row: u32;

fn x_value(r: u32, i: u32) -> f32 {
    let row = tile[r];
    return x[row * DIM + i] * inv[row - first_row] * vec_value(ATT_NORM, i);
}

fn qkv_at(row: u32, head: u32, part: u32) -> u32 {
    return ((row * N_HEADS + head) * 3u + part) * HS;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let head = group.x;
    let span = step.span[group.y];
    let slot = span.x;
    let start = span.y;
    let r0 = span.z;
    let len = span.w;
    first_row = r0;
    let group_head = head / (N_HEADS / N_KV);
    let window = desc.v[2].z;
    let local = desc.v[2].w;

    // 1 / rms of each row.
    for (var i = 0u; i < len; i++) {
        var squares = 0.0;
        for (var c = tid; c < DIM; c += WG) {
            let v = x[(r0 + i) * DIM + c];
            squares += v * v;
        }
        let total = sum_all(squares, tid);
        if tid == 0u {
            inv[i] = inv_rms(total, DIM);
        }
    }
    workgroupBarrier();

    // q of this head, k and v of its group, for the rows a tile at a time.
    let outs = 3u * HS;
    let tiles = (len + ROWS - 1u) / ROWS;
    for (var item = tid; item < tiles * outs; item += WG) {
        let t = item / outs;
        let o = item % outs;
        let part = o / HS;
        let d = o % HS;
        let nr = min(ROWS, len - t * ROWS);
        for (var r = 0u; r < ROWS; r++) {
            tile[r] = r0 + t * ROWS + min(r, nr - 1u);
        }
        var m: Mat;
        var col: u32;
        var bias = BQ;
        if part == 0u {
            m = mat(WQ);
            col = head * HS + d;
        } else {
            m = mat(select(WV, WK, part == 1u));
            col = group_head * HS + d;
            bias = select(BV, BK, part == 1u);
        }
        var acc: array<f32, ROWS>;
        dot_tile(m, col, 0u, (DIM + 31u) / 32u, nr, &acc);
        for (var r = 0u; r < nr; r++) {
            var v = acc[r];
            if QKV_BIAS {
                v += vec_value(bias, col);
            }
            qkv[qkv_at(tile[r], head, part) + d] = v;
        }
    }
    storageBarrier();
    workgroupBarrier();

    // Each row's q and k (normed where the recipe says) rotated; k and v stored.
    let half = HS / 2u;
    var angle_at = 0u;
    if local != 0u {
        angle_at = step.local_at;
    }
    let sines = angle_at + step.rows * half;
    for (var i = 0u; i < len; i++) {
        let row = r0 + i;
        var q = 0.0;
        var k = 0.0;
        if tid < HS {
            q = qkv[qkv_at(row, head, 0u) + tid];
            k = qkv[qkv_at(row, head, 1u) + tid];
        }
        if QK_NORM {
            let q_inv = inv_rms(sum_all(q * q, tid), HS);
            let k_inv = inv_rms(sum_all(k * k, tid), HS);
            if tid < HS {
                q *= q_inv * vec_value(QN, tid);
                k *= k_inv * vec_value(KN, tid);
            }
        }
        if tid < HS {
            head_q[tid] = q;
            head_k[tid] = k;
        }
        workgroupBarrier();
        if tid < HS {
            let p = tid / 2u;
            let cos = angles[angle_at + row * half + p];
            let sin = angles[sines + row * half + p];
            var q_rot: f32;
            var k_rot: f32;
            if tid % 2u == 0u {
                q_rot = head_q[tid] * cos - head_q[tid + 1u] * sin;
                k_rot = head_k[tid] * cos - head_k[tid + 1u] * sin;
            } else {
                q_rot = head_q[tid - 1u] * sin + head_q[tid] * cos;
                k_rot = head_k[tid - 1u] * sin + head_k[tid] * cos;
            }
            qkv[qkv_at(row, head, 0u) + tid] = q_rot;
            let at = (slot * step.positions + start + i) * KV_DIM + group_head * HS + tid;
            kv[at] = k_rot;
            kv[step.values_at + at] = qkv[qkv_at(row, head, 2u) + tid];
        }
        workgroupBarrier();
    }
    storageBarrier();
    workgroupBarrier();

    // Attention of each row over its positions, KEY_CHUNK keys at a time with the softmax
    // rescaled between chunks.
    let keys = slot * step.positions * KV_DIM + group_head * HS;
    for (var i = 0u; i < len; i++) {
        let row = r0 + i;
        let pos = start + i;
        var first = 0u;
        if window != 0u && pos + 1u > window {
            first = pos + 1u - window;
        }
        if tid < HS {
            head_q[tid] = qkv[qkv_at(row, head, 0u) + tid];
        }
        workgroupBarrier();
        var top = LOWEST;
        var total = 0.0;
        var out = 0.0;
        for (var c0 = first; c0 <= pos; c0 += KEY_CHUNK) {
            let n = min(KEY_CHUNK, pos + 1u - c0);
            var mine = LOWEST;
            for (var j = tid; j < n; j += WG) {
                let key = keys + (c0 + j) * KV_DIM;
                var s = 0.0;
                for (var d = 0u; d < HS; d += 4u) {
                    let q = vec4<f32>(head_q[d], head_q[d + 1u], head_q[d + 2u], head_q[d + 3u]);
                    s += dot(q, vec4<f32>(kv[key + d], kv[key + d + 1u], kv[key + d + 2u], kv[key + d + 3u]));
                }
                s *= SCALE;
                scores[j] = s;
                mine = max(mine, s);
            }
            let chunk_top = max_all(mine, tid);
            let new_top = max(top, chunk_top);
            let rescale = exp(top - new_top);
            var sum = 0.0;
            for (var j = tid; j < n; j += WG) {
                let e = exp(scores[j] - new_top);
                scores[j] = e;
                sum += e;
            }
            total = total * rescale + sum_all(sum, tid);
            // The values: unit (d, part) sums dimension d over every PARTS-th key, then unit d
            // adds the parts.
            var acc = 0.0;
            let values = step.values_at + keys + tid % HS;
            for (var j = tid / HS; j < n; j += PARTS) {
                acc += scores[j] * kv[values + (c0 + j) * KV_DIM];
            }
            partial[tid] = acc;
            workgroupBarrier();
            if tid < HS {
                var sum_v = 0.0;
                for (var p = 0u; p < PARTS; p++) {
                    sum_v += partial[p * HS + tid];
                }
                out = out * rescale + sum_v;
            }
            top = new_top;
            workgroupBarrier();
        }
        if tid < HS {
            att[row * Q_DIM + head * HS + tid] = out / total;
        }
    }
}
