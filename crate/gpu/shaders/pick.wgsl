// The greedy pick: the first index of each logit row's largest value, as run.c's argmax (a running
// maximum that only a strictly larger value replaces: NaNs are passed over, and a NaN first is
// the answer). One workgroup a row; each unit keeps the first of its own maxima, then the
// workgroup keeps the larger, the lower index on a tie.

const WG: u32 = 256u;

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> ids: array<u32>;

var<workgroup> best: array<f32, WG>;
var<workgroup> at: array<u32, WG>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let row = group.x * VOCAB;
    var top = LOWEST;
    var index = 0xffffffffu;
    for (var j = tid; j < VOCAB; j += WG) {
        let v = logits[row + j];
        if v > top || (index == 0xffffffffu && v == top) {
            top = v;
            index = j;
        }
    }
    best[tid] = top;
    at[tid] = index;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if tid < s {
            let v = best[tid + s];
            let i = at[tid + s];
            if v > best[tid] || (v == best[tid] && i < at[tid]) {
                best[tid] = v;
                at[tid] = i;
            }
        }
        workgroupBarrier();
    }
    if tid == 0u {
        let first = logits[row];
        // A NaN first is the answer, as is the first place where nothing is larger.
        ids[group.x] = select(select(at[0], 0u, at[0] == 0xffffffffu), 0u, first != first);
    }
}
