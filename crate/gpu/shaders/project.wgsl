// A projection back to the model's width added to the residual: attention's output through `wo`
// (the end of `forward::attention_half`) or the feed-forward's through `w2` (the end of
// `forward::feed_forward_half`); `gpu/shaders.rs` sets MAT, IN (its input width) and POST (the norm
// Gemma applies to it before the residual).
//
// Without that norm, each workgroup takes COLS columns for a tile of ROWS rows, and each column is
// added to x in place by the unit that summed it. With it, the norm needs a row's every column:
// a workgroup takes a tile of rows and all the columns, writes the projection to `out`, then norms
// it and adds.

@group(0) @binding(0) var<storage, read> step: Step;
@group(0) @binding(1) var<storage, read> desc: Desc;
@group(0) @binding(2) var<storage, read> wts: array<u32>;
@group(0) @binding(3) var<storage, read> src: array<f32>;
@group(0) @binding(4) var<storage, read_write> x: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

var<private> tile: array<u32, ROWS>;

fn x_value(r: u32, i: u32) -> f32 {
    return src[tile[r] * IN + i];
}

// Column `j` (if in range) of the tile's rows, summed over the slices; unit (c, 0) gets it.
fn column(j: u32, nr: u32, c: u32, slice: u32) -> array<f32, ROWS> {
    let m = mat(MAT);
    var acc: array<f32, ROWS>;
    if j < DIM {
        let blocks = slice_blocks(IN, slice);
        dot_tile(m, j, blocks.x, blocks.y, nr, &acc);
    }
    return sum_slices(&acc, c, slice);
}

@compute @workgroup_size(64, 4)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_id) unit: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let c = unit.x;
    let slice = unit.y;
    let r0 = group.y * ROWS;
    let nr = min(ROWS, step.rows - r0);
    for (var r = 0u; r < ROWS; r++) {
        tile[r] = r0 + min(r, nr - 1u);
    }
    if !POST_NORMS {
        let j = group.x * COLS + c;
        let total = column(j, nr, c, slice);
        if slice == 0u && j < DIM {
            for (var r = 0u; r < nr; r++) {
                x[tile[r] * DIM + j] += total[r];
            }
        }
        return;
    }
    for (var c0 = 0u; c0 < DIM; c0 += COLS) {
        let j = c0 + c;
        let total = column(j, nr, c, slice);
        if slice == 0u && j < DIM {
            for (var r = 0u; r < nr; r++) {
                out[tile[r] * DIM + j] = total[r];
            }
        }
    }
    storageBarrier();
    workgroupBarrier();
    for (var r = 0u; r < ROWS; r++) {
        let row = tile[r];
        var squares = 0.0;
        for (var j = tid; j < DIM; j += WG) {
            let v = out[row * DIM + j];
            squares += v * v;
        }
        let scale = inv_rms(sum_all(squares, tid), DIM);
        if r < nr {
            for (var j = tid; j < DIM; j += WG) {
                x[row * DIM + j] += out[row * DIM + j] * scale * vec_value(POST, j);
            }
        }
    }
}
