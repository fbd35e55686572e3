// The feed-forward's first part (`forward::feed_forward_half` up to `w2`): x normed, through the
// gate and up projections, `act(gate) * up` into `hidden`. Each workgroup takes COLS hidden units
// for a tile of ROWS rows.

@group(0) @binding(0) var<storage, read> step: Step;
@group(0) @binding(1) var<storage, read> desc: Desc;
@group(0) @binding(2) var<storage, read> wts: array<u32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> hidden: array<f32>;

var<workgroup> inv: array<f32, ROWS>;
var<private> tile: array<u32, ROWS>;

fn x_value(r: u32, i: u32) -> f32 {
    return x[tile[r] * DIM + i] * inv[r] * vec_value(FFN_NORM, i);
}

// GELU in its tanh form, in f32 (as llama.cpp's GPU backends compute it).
fn gelu(g: f32) -> f32 {
    let inner = 0.7978846 * g * (1.0 + 0.044715 * g * g);
    // tanh of a large argument is 1: keep exp's argument in range.
    return 0.5 * g * (1.0 + tanh(clamp(inner, -15.0, 15.0)));
}

@compute @workgroup_size(64, 4)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_id) unit: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let c = unit.x;
    let slice = unit.y;
    let r0 = group.y * ROWS;
    let nr = min(ROWS, step.rows - r0);
    var squares = vec4<f32>(0.0);
    for (var r = 0u; r < ROWS; r++) {
        tile[r] = r0 + min(r, nr - 1u);
        for (var i = tid; i < DIM; i += WG) {
            let v = x[tile[r] * DIM + i];
            squares[r] += v * v;
        }
    }
    let totals = sum_all4(squares, tid);
    if tid == 0u {
        for (var r = 0u; r < ROWS; r++) {
            inv[r] = inv_rms(totals[r], DIM);
        }
    }
    workgroupBarrier();
    let j = group.x * COLS + c;
    var gate: array<f32, ROWS>;
    var up: array<f32, ROWS>;
    if j < HIDDEN {
        let blocks = slice_blocks(DIM, slice);
        dot_tile(mat(W1), j, blocks.x, blocks.y, nr, &gate);
        dot_tile(mat(W3), j, blocks.x, blocks.y, nr, &up);
    }
    let g = sum_slices(&gate, c, slice);
    let u = sum_slices(&up, c, slice);
    if slice == 0u && j < HIDDEN {
        for (var r = 0u; r < nr; r++) {
            var a: f32;
            if GELU {
                a = gelu(g[r]);
            } else {
                a = g[r] / (1.0 + exp(-g[r]));
            }
            hidden[tile[r] * HIDDEN + j] = a * u[r];
        }
    }
}
