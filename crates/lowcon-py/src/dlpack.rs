//! DLPack, consumer side: a view of any object with `__dlpack__` (numpy, torch, CuPy)
//! for the duration of one call.
//!
//! We take the legacy `"dltensor"` capsule and leave its name alone: the producer's
//! capsule destructor then frees the managed tensor when the capsule is collected, and
//! the data itself stays alive as long as the caller's object does (as with NCCL, the
//! caller keeps its tensors alive until an asynchronous call has run).

use std::ffi::{CStr, c_void};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyDict};

use lowcon::DType;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct DLDevice {
    pub(crate) device_type: i32,
    pub(crate) device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct DLDataType {
    pub(crate) code: u8,
    pub(crate) bits: u8,
    pub(crate) lanes: u16,
}

#[repr(C)]
pub(crate) struct DLTensor {
    pub(crate) data: *mut c_void,
    pub(crate) device: DLDevice,
    pub(crate) ndim: i32,
    pub(crate) dtype: DLDataType,
    pub(crate) shape: *const i64,
    pub(crate) strides: *const i64,
    pub(crate) byte_offset: u64,
}

#[repr(C)]
pub(crate) struct DLManagedTensor {
    pub(crate) dl_tensor: DLTensor,
    pub(crate) manager_ctx: *mut c_void,
    pub(crate) deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// DLPack's code for `dtype`.
pub(crate) fn dl_dtype(dtype: DType) -> DLDataType {
    let (code, bits) = match dtype {
        DType::F32 => (2, 32),
        DType::F16 => (2, 16),
        DType::Bf16 => (4, 16),
        DType::I32 => (0, 32),
        DType::U8 => (1, 8),
        DType::I64 => (0, 64),
    };
    DLDataType { code, bits, lanes: 1 }
}

/// Where a tensor's memory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Host memory (pinned or not).
    Cpu,
    /// CUDA device memory of this device index.
    Cuda(i32),
}

/// A contiguous tensor's memory, borrowed for one call (the capsule keeps the
/// producer's managed tensor alive; on the torch fast path, the tensor itself).
pub(crate) struct View<'py> {
    _keep: Bound<'py, PyAny>,
    pub(crate) ptr: u64,
    pub(crate) count: usize,
    pub(crate) dtype: DType,
    pub(crate) place: Place,
}

impl View<'_> {
    pub(crate) fn bytes(&self) -> usize {
        self.count * self.dtype.size()
    }
}

fn dtype_of(t: DLDataType, what: &str) -> PyResult<DType> {
    Ok(match (t.code, t.bits, t.lanes) {
        (2, 32, 1) => DType::F32,
        (2, 16, 1) => DType::F16,
        (4, 16, 1) => DType::Bf16,
        (0, 32, 1) => DType::I32,
        (1, 8, 1) => DType::U8,
        (0, 64, 1) => DType::I64,
        (c, b, l) => {
            return Err(crate::errors::invalid(format!(
                "{what}: DLPack dtype (code {c}, {b} bits, {l} lanes) is not one lowcon takes (f32, f16, bf16, \
                 i32, u8, i64)"
            )));
        }
    })
}

/// The view of `obj` (named `what` in errors). `stream` is passed to `__dlpack__` for
/// CUDA producers (the stream the consumer will use, per the DLPack protocol).
pub(crate) fn view<'py>(obj: &Bound<'py, PyAny>, what: &str, stream: Option<isize>) -> PyResult<View<'py>> {
    let py = obj.py();
    if !obj.hasattr("__dlpack__")? {
        return Err(PyTypeError::new_err(format!(
            "{what}: a {} has no __dlpack__: pass a numpy array, torch tensor or CuPy array",
            obj.get_type().name()?
        )));
    }
    let cuda = obj
        .call_method0("__dlpack_device__")
        .ok()
        .and_then(|d| d.extract::<(i32, i32)>().ok())
        .is_some_and(|(t, _)| t == 2);
    let raw = if cuda {
        let kw = PyDict::new(py);
        // DLPack's stream numbering: 1 is the legacy default stream (0 is not allowed).
        kw.set_item(
            "stream",
            match stream {
                None | Some(0) => 1,
                Some(s) => s,
            },
        )?;
        obj.call_method("__dlpack__", (), Some(&kw))?
    } else {
        obj.call_method0("__dlpack__")?
    };
    let capsule = raw
        .cast_into::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err(format!("{what}: __dlpack__ did not return a capsule")))?;
    let name: &CStr = c"dltensor";
    let p = capsule.pointer_checked(Some(name)).map_err(|_| {
        crate::errors::invalid(format!("{what}: the DLPack capsule is not an unused \"dltensor\" (already consumed?)"))
    })?;
    // SAFETY: a "dltensor" capsule holds a DLManagedTensor that lives as long as the
    // capsule (we keep it in the View and do not rename it).
    let t = unsafe { &(*p.as_ptr().cast::<DLManagedTensor>()).dl_tensor };
    let dtype = dtype_of(t.dtype, what)?;
    let ndim = usize::try_from(t.ndim).map_err(|_| crate::errors::invalid(format!("{what}: ndim {}", t.ndim)))?;
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        // SAFETY: DLPack: `shape` holds `ndim` entries.
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    let count = shape.iter().try_fold(1usize, |acc, &d| usize::try_from(d).ok().and_then(|d| acc.checked_mul(d)));
    let count = count.ok_or_else(|| crate::errors::invalid(format!("{what}: bad shape {shape:?}")))?;
    if !t.strides.is_null() && count > 0 {
        // SAFETY: DLPack: non-null `strides` holds `ndim` entries.
        let strides = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
        let mut want = 1i64;
        for (&d, &s) in shape.iter().zip(strides).rev() {
            if d != 1 && s != want {
                return Err(crate::errors::invalid(format!(
                    "{what}: not contiguous (shape {shape:?}, strides {strides:?}): pass a contiguous tensor \
                     (.contiguous() / numpy.ascontiguousarray)"
                )));
            }
            want *= d;
        }
    }
    let place = match t.device.device_type {
        1 | 3 => Place::Cpu,
        2 => Place::Cuda(t.device.device_id),
        d => {
            return Err(crate::errors::invalid(format!(
                "{what}: DLPack device type {d} is neither CPU (1) nor CUDA (2)"
            )));
        }
    };
    let ptr = (t.data as u64)
        .checked_add(t.byte_offset)
        .ok_or_else(|| crate::errors::invalid(format!("{what}: data pointer overflows")))?;
    Ok(View { _keep: capsule.into_any(), ptr, count, dtype, place })
}

/// The view of a torch tensor read from its own accessors, with no DLPack export: for
/// calls on torch's current stream (the caller says so), where `__dlpack__(stream)`
/// would only find that no stream needs to wait, at the cost of Python-level work per
/// tensor. Checks what DLPack's export and `view` check: contiguity, the dtype, the
/// device. Returns None for anything that is not a plain torch tensor.
pub(crate) fn torch_view<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Option<View<'py>>> {
    let ty = obj.get_type();
    if !ty.module()?.to_cow()?.starts_with("torch") || !obj.hasattr("data_ptr")? {
        return Ok(None);
    }
    if !obj.call_method0("is_contiguous")?.extract::<bool>()? {
        let shape: Vec<i64> = obj.getattr("shape")?.extract()?;
        return Err(crate::errors::invalid(format!(
            "{what}: not contiguous (shape {shape:?}): pass a contiguous tensor (.contiguous())"
        )));
    }
    let dtype = match obj.getattr("dtype")?.str()?.to_cow()?.as_ref() {
        "torch.float32" => DType::F32,
        "torch.float16" => DType::F16,
        "torch.bfloat16" => DType::Bf16,
        "torch.int32" => DType::I32,
        "torch.uint8" => DType::U8,
        "torch.int64" => DType::I64,
        other => {
            return Err(crate::errors::invalid(format!(
                "{what}: dtype {other} is not one lowcon takes (float32, float16, bfloat16, int32, uint8, int64)"
            )));
        }
    };
    let count: usize = obj.call_method0("numel")?.extract()?;
    let ptr: u64 = obj.call_method0("data_ptr")?.extract()?;
    let place = if obj.getattr("is_cuda")?.extract::<bool>()? {
        Place::Cuda(obj.call_method0("get_device")?.extract()?)
    } else if obj.getattr("is_cpu")?.extract::<bool>()? {
        Place::Cpu
    } else {
        let device = obj.getattr("device")?.str()?.to_string();
        return Err(crate::errors::invalid(format!("{what}: a tensor on {device}, neither CPU nor CUDA")));
    };
    Ok(Some(View { _keep: obj.clone(), ptr, count, dtype, place }))
}
