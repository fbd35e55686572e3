// The final norm and the classifier (`forward::classify`): for each row the pass asks logits of
// (the last of each span, or every row), x normed, through this part of the classifier's columns,
// into the logits buffer after the rows this forward call made before.

@group(0) @binding(0) var<storage, read> step: Step;
@group(0) @binding(1) var<storage, read> desc: Desc;
@group(0) @binding(2) var<storage, read> wts: array<u32>;
@group(0) @binding(3) var<storage, read> norm: array<f32>;
@group(0) @binding(4) var<storage, read> x: array<f32>;
@group(0) @binding(5) var<storage, read_write> logits: array<f32>;

var<workgroup> inv: array<f32, ROWS>;
var<private> tile: array<u32, ROWS>;

fn x_value(r: u32, i: u32) -> f32 {
    return x[tile[r] * DIM + i] * inv[r] * norm[i];
}

// The pass's row that logit row `l` reads.
fn source_row(l: u32) -> u32 {
    if step.all_rows != 0u {
        return l;
    }
    let span = step.span[l];
    return span.z + span.w - 1u;
}

@compute @workgroup_size(64, 4)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_id) unit: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let c = unit.x;
    let slice = unit.y;
    let m = mat(0u);
    let l0 = group.y * ROWS;
    let nr = min(ROWS, step.logit_rows - l0);
    var squares = vec4<f32>(0.0);
    for (var r = 0u; r < ROWS; r++) {
        tile[r] = source_row(l0 + min(r, nr - 1u));
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
    var acc: array<f32, ROWS>;
    if j < m.n {
        let blocks = slice_blocks(DIM, slice);
        dot_tile(m, j, blocks.x, blocks.y, nr, &acc);
    }
    let total = sum_slices(&acc, c, slice);
    if slice == 0u && j < m.n {
        for (var r = 0u; r < nr; r++) {
            logits[(step.logits_first + l0 + r) * VOCAB + m.col0 + j] = total[r];
        }
    }
}
