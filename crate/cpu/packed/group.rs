//! What every packed kernel shares: the group's size, an activation row as the kernels read it,
//! the check of a group's operands, and (in wasm) a group's two halves as its 8 results.

use crate::formats::{BLOCK, RunFormat};

/// Rows in a group.
pub const GROUP: usize = 8;

/// One activation row as the kernels read it: int8 values, a scale per block, and per block what
/// a block's integer sum starts from: `-8 * sum` of its values for Q4_0 (what the nibbles' offset
/// adds), 0 for Q8_0.
#[derive(Clone, Copy)]
pub(crate) struct Act<'a> {
    pub quants: &'a [i8],
    pub scales: &'a [f32],
    pub offsets: &'a [i32],
}

/// The blocks of a group (`scales` and `quants` of `Packed::group`) and its bytes a block, after
/// checking that the group and every activation row hold them: the kernels' loads are unchecked.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "wasm32")),
    allow(dead_code)
)]
pub(crate) fn checked_group<F: RunFormat, S>(
    scales: &[S],
    quants: &[u8],
    x: &[Act],
) -> (usize, usize) {
    let blocks = scales.len() / GROUP;
    let bytes = GROUP * F::PAYLOAD;
    assert!(quants.len() >= blocks * bytes);
    assert!(x.iter().all(|x| x.quants.len() >= blocks * BLOCK
        && x.scales.len() >= blocks
        && x.offsets.len() >= blocks));
    (blocks, bytes)
}

/// A wasm kernel's two 4-lane accumulators of a group (rows 0..4, rows 4..8) as its 8 results.
#[cfg(target_arch = "wasm32")]
pub(crate) fn group_lanes([low, high]: [std::arch::wasm32::v128; 2]) -> [f32; GROUP] {
    use std::arch::wasm32::v128_store;
    let mut lanes = [0.0f32; GROUP];
    // SAFETY: `lanes` holds 8 f32.
    unsafe {
        v128_store(lanes.as_mut_ptr() as *mut _, low);
        v128_store(lanes.as_mut_ptr().add(4) as *mut _, high);
    }
    lanes
}
