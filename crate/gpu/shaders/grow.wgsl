// A layer's KV pool copied into a larger one (`plan.rs`, `ensure_kv`): each slot's keys, then its
// values, keep their positions; the new pool's slots are longer (more positions), more
// numerous, or both. `p`: words of an old slot, of a new slot, slots copied, where the old and
// the new pool's values start, and words to copy in all (keys and values of every slot).

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = id.y * groups.x * 256u + id.x;
    if i >= p[5] {
        return;
    }
    let old_slot = p[0];
    let half = p[2] * old_slot;
    // Keys (0) or values (1), the slot, the word in the slot.
    let part = i / half;
    let slot = (i % half) / old_slot;
    let word = i % old_slot;
    dst[part * p[4] + slot * p[1] + word] = src[part * p[3] + slot * old_slot + word];
}
