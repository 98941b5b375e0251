//! Thin `result`-style wrappers for the driver calls cudarc does not wrap: VMM
//! export/import, legacy IPC, host-mapped memory, peer access and stream memory
//! operations. Grouped by area; out-parameters become return values; every failure
//! keeps the call's name and the driver's code (`Error::Driver`).
//!
//! Every function here is `unsafe`: the caller must have made the right context current
//! and must pass handles and pointers that are alive. The safe types above this layer
//! (`crate::memory`, `crate::sync`) own what these functions create.

use std::ffi::{CString, c_void};
use std::os::fd::{FromRawFd, OwnedFd};

use cudarc::driver::{DriverError, sys};

use crate::error::{Error, Result};

fn check(call: &'static str, r: sys::CUresult) -> Result<()> {
    r.result().map_err(|e: DriverError| Error::driver(call, e))
}

/// CUDA virtual memory management with POSIX file-descriptor handles.
pub mod vmm {
    use super::*;

    fn prop(device: i32) -> sys::CUmemAllocationProp {
        sys::CUmemAllocationProp {
            type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            requestedHandleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            location: sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: device },
            win32HandleMetaData: std::ptr::null_mut(),
            allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
                compressionType: 0,
                gpuDirectRDMACapable: 0,
                usage: 0,
                reserved: [0; 4],
            },
        }
    }

    /// The recommended allocation granularity for `device`.
    ///
    /// # Safety
    /// The driver must be initialised.
    pub unsafe fn granularity(device: i32) -> Result<usize> {
        let p = prop(device);
        let mut g = 0usize;
        // SAFETY: valid out-pointer and property struct.
        check("cuMemGetAllocationGranularity", unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut g,
                &p,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            )
        })?;
        Ok(g)
    }

    /// `cuMemCreate` of `size` bytes (a multiple of the granularity) on `device`,
    /// exportable as a POSIX file descriptor.
    ///
    /// # Safety
    /// A context of `device` must be current.
    pub unsafe fn create(device: i32, size: usize) -> Result<sys::CUmemGenericAllocationHandle> {
        let p = prop(device);
        let mut h = 0;
        // SAFETY: valid out-pointer and property struct.
        check("cuMemCreate", unsafe { sys::cuMemCreate(&mut h, size, &p, 0) })?;
        Ok(h)
    }

    /// Exports `handle` as a file descriptor this process owns.
    ///
    /// # Safety
    /// `handle` must be a live allocation created with a POSIX-fd handle type.
    pub unsafe fn export_fd(handle: sys::CUmemGenericAllocationHandle) -> Result<OwnedFd> {
        let mut fd: i32 = -1;
        // SAFETY: for POSIX fds the out-parameter is an `int`.
        check("cuMemExportToShareableHandle", unsafe {
            sys::cuMemExportToShareableHandle(
                (&mut fd as *mut i32).cast::<c_void>(),
                handle,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        })?;
        // SAFETY: the driver just created `fd` for us.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Imports a peer's exported allocation.
    ///
    /// # Safety
    /// `fd` must be a descriptor produced by `export_fd` in some process.
    pub unsafe fn import_fd(fd: &OwnedFd) -> Result<sys::CUmemGenericAllocationHandle> {
        use std::os::fd::AsRawFd;
        let mut h = 0;
        // SAFETY: for POSIX fds the "OS handle" argument is the fd value cast to a
        // pointer (documented driver convention); the fd stays open during the call.
        check("cuMemImportFromShareableHandle", unsafe {
            sys::cuMemImportFromShareableHandle(
                &mut h,
                fd.as_raw_fd() as usize as *mut c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        })?;
        Ok(h)
    }

    /// Reserves `size` bytes of device virtual address space, maps `handle` there and
    /// grants `device` read/write access. Returns the address.
    ///
    /// # Safety
    /// A context must be current; `handle` is live and at least `size` bytes.
    pub unsafe fn map(handle: sys::CUmemGenericAllocationHandle, size: usize, device: i32) -> Result<sys::CUdeviceptr> {
        let mut ptr = 0;
        // SAFETY: valid out-pointer.
        check("cuMemAddressReserve", unsafe { sys::cuMemAddressReserve(&mut ptr, size, 0, 0, 0) })?;
        // SAFETY: `ptr` is a fresh reservation of `size` bytes.
        if let Err(e) = check("cuMemMap", unsafe { sys::cuMemMap(ptr, size, 0, handle, 0) }) {
            // SAFETY: undo the reservation we just made.
            let _ = unsafe { sys::cuMemAddressFree(ptr, size) };
            return Err(e);
        }
        let desc = sys::CUmemAccessDesc {
            location: sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: device },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: `ptr..ptr+size` is mapped; one access descriptor.
        if let Err(e) = check("cuMemSetAccess", unsafe { sys::cuMemSetAccess(ptr, size, &desc, 1) }) {
            // SAFETY: undo the mapping and reservation made above.
            unsafe {
                let _ = sys::cuMemUnmap(ptr, size);
                let _ = sys::cuMemAddressFree(ptr, size);
            }
            return Err(e);
        }
        Ok(ptr)
    }

    /// Unmaps and frees a range made by [`map`].
    ///
    /// # Safety
    /// `ptr`/`size` come from [`map`] and no work using them is pending.
    pub unsafe fn unmap(ptr: sys::CUdeviceptr, size: usize) -> Result<()> {
        // SAFETY: forwarded from the caller.
        check("cuMemUnmap", unsafe { sys::cuMemUnmap(ptr, size) })?;
        // SAFETY: forwarded from the caller.
        check("cuMemAddressFree", unsafe { sys::cuMemAddressFree(ptr, size) })
    }

    /// Releases an allocation handle (the memory goes once every mapping is gone).
    ///
    /// # Safety
    /// `handle` is live and not released twice.
    pub unsafe fn release(handle: sys::CUmemGenericAllocationHandle) -> Result<()> {
        // SAFETY: forwarded from the caller.
        check("cuMemRelease", unsafe { sys::cuMemRelease(handle) })
    }
}

/// Legacy CUDA IPC handles (the fallback when VMM export/import is refused).
pub mod ipc {
    use super::*;

    /// Bytes in a `CUipcMemHandle`.
    pub const HANDLE_BYTES: usize = 64;

    /// The IPC handle of an allocation made with `cuMemAlloc`.
    ///
    /// # Safety
    /// `ptr` is the base of a live `cuMemAlloc` allocation in the current context.
    pub unsafe fn get_handle(ptr: sys::CUdeviceptr) -> Result<[u8; HANDLE_BYTES]> {
        let mut h = sys::CUipcMemHandle { reserved: [0; HANDLE_BYTES] };
        // SAFETY: valid out-pointer.
        check("cuIpcGetMemHandle", unsafe { sys::cuIpcGetMemHandle(&mut h, ptr) })?;
        Ok(h.reserved.map(|b| b as u8))
    }

    /// Opens a peer's IPC handle; returns its address in this process.
    ///
    /// # Safety
    /// A context must be current; `bytes` is a handle from another process.
    pub unsafe fn open_handle(bytes: &[u8; HANDLE_BYTES]) -> Result<sys::CUdeviceptr> {
        let h = sys::CUipcMemHandle { reserved: bytes.map(|b| b as _) };
        let mut ptr = 0;
        // SAFETY: valid out-pointer; lazy peer access enabling as PyTorch does.
        check("cuIpcOpenMemHandle", unsafe {
            sys::cuIpcOpenMemHandle_v2(&mut ptr, h, sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32)
        })?;
        Ok(ptr)
    }

    /// Closes an address opened with [`open_handle`].
    ///
    /// # Safety
    /// `ptr` came from [`open_handle`] and no pending work uses it.
    pub unsafe fn close_handle(ptr: sys::CUdeviceptr) -> Result<()> {
        // SAFETY: forwarded from the caller.
        check("cuIpcCloseMemHandle", unsafe { sys::cuIpcCloseMemHandle(ptr) })
    }

    /// `cuMemAlloc` (IPC handles need a non-pool allocation).
    ///
    /// # Safety
    /// A context must be current.
    pub unsafe fn alloc(bytes: usize) -> Result<sys::CUdeviceptr> {
        let mut ptr = 0;
        // SAFETY: valid out-pointer.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) })?;
        Ok(ptr)
    }

    /// `cuMemFree`.
    ///
    /// # Safety
    /// `ptr` came from [`alloc`] and no pending work uses it.
    pub unsafe fn free(ptr: sys::CUdeviceptr) -> Result<()> {
        // SAFETY: forwarded from the caller.
        check("cuMemFree", unsafe { sys::cuMemFree_v2(ptr) })
    }
}

/// Stream capture (CUDA graphs).
/// A captured graph's nodes.
pub mod graph;

/// Kernel launches cudarc's builder cannot make.
pub mod launch {
    use super::*;

    /// Launches `func` on `stream` with programmatic stream serialization allowed
    /// (NOTE [LL launch overlap] in `crate::cuda::kernels`): the grid may be scheduled
    /// while the stream's previous kernel still runs, once that kernel's CTAs have all
    /// triggered (`griddepcontrol.launch_dependents`) or exited, and must itself start
    /// with `griddepcontrol.wait`. Returns `Ok(false)`, with nothing enqueued, where
    /// the driver does not support the attribute.
    ///
    /// # Safety
    /// `func` is a loaded kernel of the stream's context that waits as above, and
    /// `params` holds one pointer per kernel parameter, to a value of that parameter's
    /// type, alive until this returns.
    pub unsafe fn programmatic(
        func: sys::CUfunction,
        (grid, block, smem): (u32, u32, u32),
        stream: sys::CUstream,
        params: &mut [*mut c_void],
    ) -> Result<bool> {
        // SAFETY: plain data; the union member set is the one the attribute's id names.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let cfg = sys::CUlaunchConfig {
            gridDimX: grid,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: smem,
            hStream: stream,
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: `cfg` and `attr` live across the call; the rest is the caller's.
        let r = unsafe { sys::cuLaunchKernelEx(&cfg, func, params.as_mut_ptr(), std::ptr::null_mut()) };
        match r {
            sys::CUresult::CUDA_ERROR_NOT_SUPPORTED | sys::CUresult::CUDA_ERROR_NOT_FOUND => Ok(false),
            r => check("cuLaunchKernelEx", r).map(|()| true),
        }
    }
}

pub mod capture {
    use super::*;

    /// Where a stream stands with stream capture.
    #[derive(Debug)]
    pub enum Status {
        /// Not being captured: work runs when enqueued.
        None,
        /// Being captured into a CUDA graph.
        Active,
        /// Its capture was invalidated, or asking is itself illegal (as for the legacy
        /// stream while another stream captures in global mode): a word for the error.
        Other(String),
    }

    /// Whether `stream` is being captured into a graph (`cuStreamIsCapturing`).
    ///
    /// # Safety
    /// `stream` is a live stream of the current context.
    pub unsafe fn status(stream: sys::CUstream) -> Status {
        let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: valid out-pointer; the caller passes a live stream.
        let r = unsafe { sys::cuStreamIsCapturing(stream, &mut st) };
        match (check("cuStreamIsCapturing", r), st) {
            (Err(e), _) => Status::Other(format!("asking whether it is captured failed ({e})")),
            (Ok(()), sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE) => Status::None,
            (Ok(()), sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE) => Status::Active,
            (Ok(()), _) => Status::Other("its capture into a CUDA graph was invalidated".into()),
        }
    }

    /// Makes the calling thread's CUDA calls exempt from other threads' global-mode
    /// captures (`cuThreadExchangeStreamCaptureMode(RELAXED)`), as PyTorch does in its
    /// NCCL watchdog: lowcon's own threads (watchdog, sentinel, frees) poll events and
    /// free memory, which would otherwise fail, and break the application's capture,
    /// while it captures unrelated work.
    pub fn relax_this_thread() {
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: valid in/out pointer; affects only the calling thread. A failure
        // (no driver) leaves the default mode, which is only stricter.
        let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
}

/// Pinned host memory that kernels can write (error records).
pub mod host_mem {
    use super::*;

    /// `cuMemHostAlloc(DEVICEMAP | PORTABLE)`; returns (host pointer, device pointer).
    ///
    /// # Safety
    /// A context must be current.
    pub unsafe fn alloc_mapped(bytes: usize) -> Result<(*mut c_void, sys::CUdeviceptr)> {
        let mut host = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut host, bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE)
        })?;
        // SAFETY: `host` is a live mapped allocation.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
        let mut dev = 0;
        // SAFETY: valid out-pointer; `host` was allocated with DEVICEMAP.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, host, 0) };
        if let Err(e) = check("cuMemHostGetDevicePointer", r) {
            // SAFETY: free what we just allocated.
            let _ = unsafe { sys::cuMemFreeHost(host) };
            return Err(e);
        }
        Ok((host, dev))
    }

    /// `cuMemHostRegister(DEVICEMAP | PORTABLE)` of existing host memory (a shared
    /// mapping, say); returns its device address.
    ///
    /// # Safety
    /// A context must be current; `host` is page-aligned, `bytes` a multiple of the page
    /// size, and the range stays mapped until [`unregister`].
    pub unsafe fn register(host: *mut c_void, bytes: usize) -> Result<sys::CUdeviceptr> {
        // SAFETY: forwarded from the caller.
        check("cuMemHostRegister", unsafe {
            sys::cuMemHostRegister_v2(host, bytes, sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE)
        })?;
        let mut dev = 0;
        // SAFETY: valid out-pointer; `host` was just registered with DEVICEMAP.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, host, 0) };
        if let Err(e) = check("cuMemHostGetDevicePointer", r) {
            // SAFETY: undo the registration above.
            let _ = unsafe { sys::cuMemHostUnregister(host) };
            return Err(e);
        }
        Ok(dev)
    }

    /// `cuMemHostUnregister`.
    ///
    /// # Safety
    /// `host` was registered by [`register`]; no pending GPU work uses it.
    pub unsafe fn unregister(host: *mut c_void) -> Result<()> {
        // SAFETY: forwarded from the caller.
        check("cuMemHostUnregister", unsafe { sys::cuMemHostUnregister(host) })
    }

    /// `cuMemFreeHost`.
    ///
    /// # Safety
    /// `host` came from [`alloc_mapped`]; no pending kernel writes it.
    pub unsafe fn free(host: *mut c_void) -> Result<()> {
        // SAFETY: forwarded from the caller.
        check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(host) })
    }
}

/// Device queries.
pub mod device {
    use super::*;

    /// The device with PCI bus id `bus_id` (as `DeviceInfo::pci_bus_id` prints it).
    ///
    /// # Safety
    /// The driver must be initialised.
    pub unsafe fn by_pci_bus_id(bus_id: &str) -> Result<sys::CUdevice> {
        let c = CString::new(bus_id).map_err(|_| Error::InvalidArgument(format!("PCI bus id {bus_id:?}")))?;
        let mut d = 0;
        // SAFETY: valid out-pointer and C string.
        check("cuDeviceGetByPCIBusId", unsafe { sys::cuDeviceGetByPCIBusId(&mut d, c.as_ptr()) })?;
        Ok(d)
    }

    /// The ordinal of the device that owns the memory at `ptr` (errors for host memory
    /// and unknown addresses).
    ///
    /// # Safety
    /// The driver must be initialised.
    pub unsafe fn pointer_ordinal(ptr: sys::CUdeviceptr) -> Result<i32> {
        let mut ordinal: i32 = -1;
        // SAFETY: for DEVICE_ORDINAL the out-parameter is an `int`.
        check("cuPointerGetAttribute(DEVICE_ORDINAL)", unsafe {
            sys::cuPointerGetAttribute(
                (&mut ordinal as *mut i32).cast::<c_void>(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr,
            )
        })?;
        Ok(ordinal)
    }

    /// The allocation that holds `ptr`: its base address and size
    /// (`cuMemGetAddressRange`).
    ///
    /// # Safety
    /// A context must be current.
    pub unsafe fn address_range(ptr: sys::CUdeviceptr) -> Result<(sys::CUdeviceptr, usize)> {
        let (mut base, mut size) = (0, 0);
        // SAFETY: valid out-pointers.
        check("cuMemGetAddressRange", unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) })?;
        Ok((base, size))
    }

    /// The process-unique id of the allocation that holds `ptr`: a new allocation at
    /// the same address gets a new id (`CU_POINTER_ATTRIBUTE_BUFFER_ID`).
    ///
    /// # Safety
    /// The driver must be initialised.
    pub unsafe fn buffer_id(ptr: sys::CUdeviceptr) -> Result<u64> {
        let mut id: u64 = 0;
        // SAFETY: for BUFFER_ID the out-parameter is an `unsigned long long`.
        check("cuPointerGetAttribute(BUFFER_ID)", unsafe {
            sys::cuPointerGetAttribute(
                (&mut id as *mut u64).cast::<c_void>(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID,
                ptr,
            )
        })?;
        Ok(id)
    }

    /// Whether `dev` can map `peer`'s memory.
    ///
    /// # Safety
    /// The driver must be initialised.
    pub unsafe fn can_access_peer(dev: sys::CUdevice, peer: sys::CUdevice) -> Result<bool> {
        let mut ok = 0;
        // SAFETY: valid out-pointer.
        check("cuDeviceCanAccessPeer", unsafe { sys::cuDeviceCanAccessPeer(&mut ok, dev, peer) })?;
        Ok(ok != 0)
    }
}

/// Stream memory operations and small stream-ordered copies: synchronisation that
/// needs no SM.
pub mod mem_op {
    use super::*;

    /// Enqueues `*addr = value` (with the driver's default memory barrier before it).
    ///
    /// # Safety
    /// `addr` is 4-byte-aligned device memory valid when the operation runs.
    pub unsafe fn write_u32(stream: sys::CUstream, addr: sys::CUdeviceptr, value: u32) -> Result<()> {
        let _t = crate::cuda::enqueued::time(crate::cuda::enqueued::Enqueue::Memop);
        // SAFETY: forwarded from the caller.
        check("cuStreamWriteValue32", unsafe {
            sys::cuStreamWriteValue32_v2(
                stream,
                addr,
                value,
                sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
            )
        })
    }

    mod batch;
    pub use batch::{Op, batch};

    /// Enqueues a wait until `(int32_t)(*addr - value) >= 0`.
    ///
    /// # Safety
    /// `addr` is 4-byte-aligned device memory valid while the wait runs.
    pub unsafe fn wait_geq_u32(stream: sys::CUstream, addr: sys::CUdeviceptr, value: u32) -> Result<()> {
        let _t = crate::cuda::enqueued::time(crate::cuda::enqueued::Enqueue::Memop);
        // SAFETY: forwarded from the caller.
        check("cuStreamWaitValue32", unsafe {
            sys::cuStreamWaitValue32_v2(
                stream,
                addr,
                value,
                sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
            )
        })
    }

    /// Copies `dst.len()` elements from device memory at `src` to the host, on `stream`, and
    /// waits for that stream.
    ///
    /// # Safety
    /// `src` is valid device memory of at least `size_of_val(dst)` bytes.
    pub unsafe fn copy_to_host<T: bytemuck::Pod>(
        stream: sys::CUstream,
        dst: &mut [T],
        src: sys::CUdeviceptr,
    ) -> Result<()> {
        // SAFETY: `dst` is a live host slice of the copied size; forwarded from the caller.
        check("cuMemcpyDtoHAsync", unsafe {
            sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), src, std::mem::size_of_val(dst), stream)
        })?;
        // SAFETY: a stream handle the caller owns; `dst` stays borrowed until it returns.
        check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(stream) })
    }

    /// Copies `src` from the host to device memory at `dst`, on `stream`, and waits for
    /// that stream.
    ///
    /// # Safety
    /// `dst` is valid device memory of at least `size_of_val(src)` bytes.
    pub unsafe fn copy_from_host<T: bytemuck::Pod>(
        stream: sys::CUstream,
        dst: sys::CUdeviceptr,
        src: &[T],
    ) -> Result<()> {
        // SAFETY: `src` is a live host slice of the copied size; forwarded from the caller.
        check("cuMemcpyHtoDAsync", unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), std::mem::size_of_val(src), stream)
        })?;
        // SAFETY: a stream handle the caller owns; `src` stays borrowed until it returns.
        check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(stream) })
    }

    /// Enqueues filling `bytes` bytes at `dst` with `value`.
    ///
    /// # Safety
    /// `dst` is valid device memory of at least `bytes` bytes when it runs.
    pub unsafe fn fill(stream: sys::CUstream, dst: sys::CUdeviceptr, value: u8, bytes: usize) -> Result<()> {
        let _t = crate::cuda::enqueued::time(crate::cuda::enqueued::Enqueue::Copy);
        // SAFETY: forwarded from the caller.
        check("cuMemsetD8Async", unsafe { sys::cuMemsetD8Async(dst, value, bytes, stream) })
    }

    /// Enqueues a fill of `words` 32-bit words at `dst` with `value`.
    ///
    /// # Safety
    /// `dst` is valid, 4-byte-aligned device memory for `words` words when it runs.
    pub unsafe fn fill_u32(stream: sys::CUstream, dst: sys::CUdeviceptr, value: u32, words: usize) -> Result<()> {
        let _t = crate::cuda::enqueued::time(crate::cuda::enqueued::Enqueue::Copy);
        // SAFETY: forwarded from the caller.
        check("cuMemsetD32Async", unsafe { sys::cuMemsetD32Async(dst, value, words, stream) })
    }

    /// Enqueues a device-to-device copy of `bytes` (the copy engine for peer memory),
    /// with the copy-engine hint where `hint` (a plan's `copy_hint`) and the driver has
    /// batched copies.
    ///
    /// # Safety
    /// Both ranges are valid device memory (this device or mapped peers) when it runs.
    pub unsafe fn copy(
        stream: sys::CUstream,
        dst: sys::CUdeviceptr,
        src: sys::CUdeviceptr,
        bytes: usize,
        hint: bool,
    ) -> Result<()> {
        let _t = crate::cuda::enqueued::time(crate::cuda::enqueued::Enqueue::Copy);
        if hint && batch_copies_supported() {
            // SAFETY: forwarded from the caller.
            return unsafe { copy_prefer_engines(stream, dst, src, bytes) };
        }
        // SAFETY: forwarded from the caller.
        check("cuMemcpyDtoDAsync", unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream) })
    }

    /// Enqueues `copies` (destination, source, bytes) as one `cuMemcpyBatchAsync_v2`
    /// (NOTE [batched copies] in `coll::gpu`): the driver may run them at once, on several
    /// copy engines, where copies enqueued one by one on a stream run one after another.
    /// Each source is read in stream order. Falls back to one copy each where the driver
    /// predates CUDA 13 or the stream is a legacy default stream (which the batch call
    /// refuses, as NCCL's copy-engine collectives found). Never while capturing: the
    /// caller checks (captured batches are not supported by every driver).
    ///
    /// # Safety
    /// Every range is valid device memory (this device or mapped peers) when it runs.
    pub unsafe fn copy_batch(
        stream: sys::CUstream,
        copies: &[(sys::CUdeviceptr, sys::CUdeviceptr, usize)],
        hint: bool,
    ) -> Result<()> {
        let copies: Vec<_> = copies.iter().copied().filter(|c| c.2 > 0).collect();
        let legacy = stream.is_null() || stream as usize == 1 || stream as usize == 2;
        if copies.len() < 2 || legacy || !batch_copies_supported() {
            for &(dst, src, bytes) in &copies {
                // SAFETY: forwarded from the caller.
                unsafe { copy(stream, dst, src, bytes, hint)? };
            }
            return Ok(());
        }
        let (mut d, mut s, mut n): (Vec<_>, Vec<_>, Vec<_>) = (
            copies.iter().map(|c| c.0).collect(),
            copies.iter().map(|c| c.1).collect(),
            copies.iter().map(|c| c.2).collect(),
        );
        // SAFETY: an all-zero CUmemcpyAttributes is a valid value (invalid location
        // types, no flags), set below as NCCL's copy-engine collectives set it.
        let mut attr: sys::CUmemcpyAttributes = unsafe { std::mem::zeroed() };
        attr.srcAccessOrder = sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        if hint {
            attr.flags = sys::CUmemcpyFlags::CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE as u32;
        }
        let mut first = 0usize;
        let _t = crate::cuda::enqueued::time(crate::cuda::enqueued::Enqueue::Copy);
        // SAFETY: `d`, `s` and `n` are arrays of `copies.len()` entries that outlive the
        // call (the driver reads them before it returns); one attribute applies from copy
        // 0; the ranges are valid per the caller.
        check("cuMemcpyBatchAsync_v2", unsafe {
            sys::cuMemcpyBatchAsync_v2(
                d.as_mut_ptr(),
                s.as_mut_ptr(),
                n.as_mut_ptr(),
                copies.len(),
                &mut attr,
                &mut first,
                1,
                stream,
            )
        })
    }

    /// Whether the driver has `cuMemcpyBatchAsync_v2` (CUDA 13; cudarc would panic on
    /// a missing symbol, so older drivers are never asked). Logged once when not.
    fn batch_copies_supported() -> bool {
        static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *OK.get_or_init(|| {
            let ok = crate::cuda::driver_version().is_ok_and(|(major, _)| major >= 13);
            if !ok {
                crate::log::trace(0, "LOWCON_COPY_ENGINE_HINT ignored: the driver predates CUDA 13");
            }
            ok
        })
    }

    /// One copy through `cuMemcpyBatchAsync_v2`, stream-ordered, preferring copy
    /// engines (`CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE`; location hints are ignored
    /// for device memory).
    ///
    /// # Safety
    /// As [`copy`].
    unsafe fn copy_prefer_engines(
        stream: sys::CUstream,
        dst: sys::CUdeviceptr,
        src: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<()> {
        let (mut d, mut s, mut n) = (dst, src, bytes);
        // SAFETY: an all-zero CUmemcpyAttributes is a valid value (invalid location
        // types, no flags), set below as NCCL's and TensorRT-LLM's users of this call do.
        let mut attr: sys::CUmemcpyAttributes = unsafe { std::mem::zeroed() };
        attr.srcAccessOrder = sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        attr.flags = sys::CUmemcpyFlags::CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE as u32;
        let mut first = 0usize;
        // SAFETY: one copy described by valid out-of-line arrays of length 1, one
        // attribute applying from copy 0; the ranges are valid per the caller.
        check("cuMemcpyBatchAsync_v2", unsafe {
            sys::cuMemcpyBatchAsync_v2(&mut d, &mut s, &mut n, 1, &mut attr, &mut first, 1, stream)
        })
    }
}
