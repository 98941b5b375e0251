//! The sweep's buffers: symmetric ones (zero-copy), or ordinary device memory with
//! `--staged`, sized for the largest size and filled with a harmless pattern.

use lowcon::{DType, DeviceBuf, SymmetricBuffer};
use lowcon_selftest::coll::GpuRunner;

use crate::Res;

/// lowcon's benchmark buffers: symmetric, or ordinary device memory with `--staged`.
pub(super) struct Buffers {
    pub(super) input: Mem,
    output: Mem,
}

pub(super) enum Mem {
    Sym(SymmetricBuffer),
    Plain(cudarc::driver::CudaSlice<u8>),
}

impl Mem {
    fn new(r: &GpuRunner, staged: bool, bytes: usize) -> Res<Self> {
        let m = if staged { Mem::Plain(r.stream.alloc_zeros::<u8>(bytes)?) } else { Mem::Sym(r.g.alloc(bytes)?) };
        // SAFETY: fills the whole live allocation on the runner's stream (synchronised next).
        unsafe { r.stream.fill(m.ptr(), 0x3c, bytes)? };
        r.stream.synchronize()?;
        Ok(m)
    }
    fn ptr(&self) -> u64 {
        match self {
            Mem::Sym(b) => b.local_ptr(),
            Mem::Plain(s) => lowcon::cuda::device_ptr(s),
        }
    }
    /// Fills the first `bytes` with the 32-bit `word` (synchronously).
    pub(super) fn fill_words(&self, r: &GpuRunner, word: u32, bytes: usize) -> Res<()> {
        let host: Vec<u8> = std::iter::repeat_n(word.to_le_bytes(), bytes / 4).flatten().collect();
        // SAFETY: the allocation holds `bytes` (the sweep's maximum); synchronous copy.
        unsafe { r.stream.copy_from_host(self.ptr(), &host)? };
        r.stream.synchronize()?;
        Ok(())
    }
    fn buf(&self, count: usize, dtype: DType) -> lowcon::Result<DeviceBuf<'_>> {
        match self {
            Mem::Sym(b) => DeviceBuf::symmetric(b, 0, count, dtype),
            // SAFETY: callers ask for at most the allocated size (the sweep's maximum).
            Mem::Plain(s) => Ok(unsafe { DeviceBuf::from_raw(lowcon::cuda::device_ptr(s), count, dtype) }),
        }
    }
}

impl Buffers {
    pub(super) fn new(r: &GpuRunner, staged: bool, in_bytes: usize, out_bytes: usize) -> Res<Self> {
        Ok(Self { input: Mem::new(r, staged, in_bytes)?, output: Mem::new(r, staged, out_bytes)? })
    }
    pub(super) fn input(&self, count: usize, dtype: DType) -> lowcon::Result<DeviceBuf<'_>> {
        self.input.buf(count, dtype)
    }
    pub(super) fn output(&self, count: usize, dtype: DType) -> lowcon::Result<DeviceBuf<'_>> {
        self.output.buf(count, dtype)
    }
}
