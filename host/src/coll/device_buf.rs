//! [`DeviceBuf`]: a GPU collective's buffer argument, ordinary device memory or a range
//! of a symmetric buffer.

use cudarc::driver::{CudaSlice, sys};

use super::{DType, Element};
use crate::error::{Error, Result};
use crate::memory::SymmetricBuffer;

/// A device buffer given to a collective: ordinary device memory, or a range of a
/// [`SymmetricBuffer`] (which peers can reach directly, saving a staging copy).
#[derive(Clone, Copy)]
pub struct DeviceBuf<'a> {
    pub(crate) ptr: sys::CUdeviceptr,
    pub(crate) count: usize,
    pub(crate) dtype: DType,
    /// The symmetric buffer and the byte offset of `ptr` in it.
    pub(crate) symm: Option<(&'a SymmetricBuffer, usize)>,
}

impl<'a> DeviceBuf<'a> {
    /// A whole cudarc slice (as input).
    pub fn slice<T: Element>(s: &'a CudaSlice<T>) -> Self {
        Self { ptr: crate::cuda::device_ptr(s), count: s.len(), dtype: T::DTYPE, symm: None }
    }

    /// A whole cudarc slice (as output: the collective writes it).
    pub fn slice_mut<T: Element>(s: &'a mut CudaSlice<T>) -> Self {
        Self { ptr: crate::cuda::device_ptr(s), count: s.len(), dtype: T::DTYPE, symm: None }
    }

    /// `count` elements of `dtype` at a raw device address.
    ///
    /// # Safety
    /// `ptr` must stay valid for `count` elements until the collective has run.
    pub unsafe fn from_raw(ptr: sys::CUdeviceptr, count: usize, dtype: DType) -> Self {
        Self { ptr, count, dtype, symm: None }
    }

    /// `count` elements of `dtype` at byte `offset` of a symmetric buffer. Every rank must
    /// pass the same offset and count: peers address each other's copies by it.
    pub fn symmetric(buf: &'a SymmetricBuffer, offset: usize, count: usize, dtype: DType) -> Result<Self> {
        let bytes = count.checked_mul(dtype.size());
        if bytes.and_then(|b| b.checked_add(offset)).is_none_or(|end| end > buf.len()) {
            return Err(Error::InvalidArgument(format!(
                "rank {}: {count} {dtype} elements at byte {offset} do not fit the {}-byte symmetric buffer",
                buf.rank(),
                buf.len()
            )));
        }
        Ok(Self { ptr: buf.local_ptr() + offset as u64, count, dtype, symm: Some((buf, offset)) })
    }

    /// Elements `start..start + count` of this buffer (any element alignment).
    pub fn sub(self, start: usize, count: usize) -> Result<Self> {
        if start.checked_add(count).is_none_or(|end| end > self.count) {
            return Err(Error::InvalidArgument(format!(
                "elements {start}..{start}+{count} are outside a buffer of {}",
                self.count
            )));
        }
        let off = start * self.dtype.size();
        Ok(Self { ptr: self.ptr + off as u64, count, symm: self.symm.map(|(b, o)| (b, o + off)), ..self })
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bytes.
    pub fn bytes(&self) -> usize {
        self.count * self.dtype.size()
    }

    /// The device address.
    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// Whether peers can reach it directly.
    pub fn is_symmetric(&self) -> bool {
        self.symm.is_some()
    }
}
