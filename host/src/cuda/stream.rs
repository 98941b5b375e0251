//! Streams and events, with lowcon errors and typed memory helpers.

use std::sync::Arc;

use bytemuck::Pod;
use cudarc::driver::{
    CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, ValidAsZeroBits, result, sys,
};

use super::{CaptureStatus, Device, NodeCounts, raw};
use crate::error::{Error, Result, drv};

/// Scheduling priority of a stream. Collectives usually run on a `High` stream so that
/// their short synchronisation kernels are not queued behind a long GEMM's CTAs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StreamPriority {
    /// The device's default (lowest) priority.
    #[default]
    Default,
    /// The greatest priority the device supports.
    High,
    /// An explicit driver priority value (numerically smaller is higher); clamped to the
    /// device's range.
    Value(i32),
}

/// A non-blocking CUDA stream on one device.
#[derive(Clone, Debug)]
pub struct Stream {
    inner: Arc<CudaStream>,
    device: Device,
}

impl Stream {
    pub(crate) fn new(device: &Device, priority: StreamPriority) -> Result<Self> {
        device.bind_to_thread()?;
        let (least, greatest) = result::stream::get_priority_range().map_err(drv("cuCtxGetStreamPriorityRange"))?;
        let p = match priority {
            StreamPriority::Default => least,
            StreamPriority::High => greatest,
            StreamPriority::Value(v) => v.clamp(greatest, least),
        };
        let inner = device.cuda_context().new_stream_with_priority(p).map_err(drv("cuStreamCreateWithPriority"))?;
        Ok(Self { inner, device: device.clone() })
    }

    /// Wraps a stream owned by someone else (a C or Python caller's `cudaStream_t`;
    /// null is the legacy default stream) without taking ownership: dropping the
    /// wrapper leaves the stream alone.
    ///
    /// # Safety
    /// `raw` is null or a live stream of `device`'s primary context, and its owner keeps
    /// it alive while the wrapper (or work enqueued through it) is in use.
    pub unsafe fn wrap_borrowed(device: &Device, raw: sys::CUstream) -> Result<Self> {
        device.bind_to_thread()?;
        // SAFETY: forwarded from the caller.
        let inner = unsafe { device.cuda_context().wrap_borrowed_stream(raw) };
        Ok(Self { inner, device: device.clone() })
    }

    /// The device this stream belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The underlying cudarc stream (for launching kernels and interoperating).
    pub fn cuda_stream(&self) -> &Arc<CudaStream> {
        &self.inner
    }

    /// The raw `CUstream`.
    pub fn raw(&self) -> sys::CUstream {
        self.inner.cu_stream()
    }

    /// The stream's priority as the driver reports it.
    pub fn priority(&self) -> Result<i32> {
        let mut p = 0i32;
        // SAFETY: the stream is alive (we hold it) and `p` is a valid out-pointer.
        unsafe { sys::cuStreamGetPriority(self.raw(), &mut p) }.result().map_err(drv("cuStreamGetPriority"))?;
        Ok(p)
    }

    /// Blocks until everything enqueued on this stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.synchronize().map_err(drv("cuStreamSynchronize"))
    }

    /// Allocates `len` zeroed elements (stream-ordered).
    pub fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize) -> Result<CudaSlice<T>> {
        self.inner.alloc_zeros(len).map_err(drv("cuMemAllocAsync"))
    }

    /// Copies `data` to a new device allocation.
    pub fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        self.inner.clone_htod(data).map_err(drv("cuMemcpyHtoDAsync"))
    }

    /// Overwrites `dst` with `data`; the lengths must match.
    pub fn write<T: DeviceRepr>(&self, data: &[T], dst: &mut CudaSlice<T>) -> Result<()> {
        if data.len() != dst.len() {
            return Err(Error::InvalidArgument(format!(
                "host data has {} elements but the device buffer has {}",
                data.len(),
                dst.len()
            )));
        }
        self.inner.memcpy_htod(data, dst).map_err(drv("cuMemcpyHtoDAsync"))
    }

    /// Copies a device buffer back to the host (synchronises the stream).
    pub fn download<T: DeviceRepr + Default + Clone>(&self, src: &CudaSlice<T>) -> Result<Vec<T>> {
        self.inner.clone_dtoh(src).map_err(drv("cuMemcpyDtoHAsync"))
    }

    /// Fills a device buffer with the byte `value` (stream-ordered), e.g. to poison
    /// outputs before a kernel so unwritten elements show.
    pub fn fill_bytes<T: DeviceRepr>(&self, dst: &mut CudaSlice<T>, value: u8) -> Result<()> {
        let bytes = dst.num_bytes();
        let (ptr, _sync) = dst.device_ptr_mut(&self.inner);
        // SAFETY: `ptr` is the start of `dst`'s allocation, valid for `bytes` bytes,
        // and the memset is ordered on this stream like any other use of `dst`.
        unsafe { result::memset_d8_async(ptr, value, bytes, self.raw()) }.map_err(drv("cuMemsetD8Async"))
    }

    /// Allocates a zeroed device copy of one `T: Pod` record (error records, reports),
    /// stored as bytes so that any ABI type can be used.
    pub fn alloc_record<T: Pod>(&self) -> Result<DeviceRecord<T>> {
        Ok(DeviceRecord { bytes: self.alloc_zeros::<u8>(size_of::<T>())?, _t: std::marker::PhantomData })
    }

    /// Records an event on this stream.
    pub fn record(&self, event: &Event) -> Result<()> {
        let _t = super::enqueued::time(super::enqueued::Enqueue::Event);
        event.inner.record(&self.inner).map_err(drv("cuEventRecord"))
    }

    /// Makes future work on this stream wait for `event`.
    pub fn wait(&self, event: &Event) -> Result<()> {
        let _t = super::enqueued::time(super::enqueued::Enqueue::Event);
        self.inner.wait(&event.inner).map_err(drv("cuStreamWaitEvent"))
    }

    /// A new event on this stream's device; `timing` enables `elapsed_ms`.
    pub fn event(&self, timing: bool) -> Result<Event> {
        self.device.event(timing)
    }
}

/// Copies, fills and stream memory operations at raw device addresses: a symmetric
/// buffer's `local_ptr` or `peer_ptr`, a [`DeviceAlloc`](super::DeviceAlloc), a
/// [`MappedHostAlloc`](super::MappedHostAlloc), [`device_ptr`] of a slice. The caller
/// vouches for the addresses (hence `unsafe`). As for every driver call, the stream's
/// device must be current on the calling thread ([`Device::bind_to_thread`]), or the
/// driver returns an error.
impl Stream {
    /// Copies `src` from the host to device memory at `dst`, then waits for this stream
    /// (so the copy is done, and everything enqueued before it, when this returns).
    ///
    /// # Safety
    /// `dst` is device memory valid for at least `size_of_val(src)` bytes.
    pub unsafe fn copy_from_host<T: Pod>(&self, dst: sys::CUdeviceptr, src: &[T]) -> Result<()> {
        // SAFETY: the stream is live (held by `self`); `dst` as the caller guarantees.
        unsafe { raw::mem_op::copy_from_host(self.raw(), dst, src) }
    }

    /// Copies `dst.len()` elements from device memory at `src` to the host, then waits for
    /// this stream.
    ///
    /// # Safety
    /// `src` is device memory valid for at least `size_of_val(dst)` bytes.
    pub unsafe fn copy_to_host<T: Pod>(&self, dst: &mut [T], src: sys::CUdeviceptr) -> Result<()> {
        // SAFETY: the stream is live (held by `self`); `src` as the caller guarantees.
        unsafe { raw::mem_op::copy_to_host(self.raw(), dst, src) }
    }

    /// Enqueues a device-to-device copy of `bytes` from `src` to `dst` (this device's
    /// memory or a mapped peer's; the driver picks copy engine or kernel, with no hint).
    ///
    /// # Safety
    /// Both ranges are valid device memory of at least `bytes` bytes when the copy runs.
    pub unsafe fn copy(&self, dst: sys::CUdeviceptr, src: sys::CUdeviceptr, bytes: usize) -> Result<()> {
        // SAFETY: the stream is live (held by `self`); the ranges as the caller guarantees.
        unsafe { raw::mem_op::copy(self.raw(), dst, src, bytes, false) }
    }

    /// Enqueues filling `bytes` bytes at `dst` with `value`.
    ///
    /// # Safety
    /// `dst` is device memory valid for at least `bytes` bytes when the fill runs.
    pub unsafe fn fill(&self, dst: sys::CUdeviceptr, value: u8, bytes: usize) -> Result<()> {
        // SAFETY: the stream is live (held by `self`); `dst` as the caller guarantees.
        unsafe { raw::mem_op::fill(self.raw(), dst, value, bytes) }
    }

    /// Enqueues filling `words` 32-bit words at `dst` with `value`.
    ///
    /// # Safety
    /// `dst` is 4-byte-aligned device memory valid for at least `words` words when the
    /// fill runs.
    pub unsafe fn fill_u32(&self, dst: sys::CUdeviceptr, value: u32, words: usize) -> Result<()> {
        // SAFETY: the stream is live (held by `self`); `dst` as the caller guarantees.
        unsafe { raw::mem_op::fill_u32(self.raw(), dst, value, words) }
    }

    /// Enqueues `*addr = value` as a stream memory operation (no kernel; with the
    /// driver's default memory barrier before it).
    ///
    /// # Safety
    /// `addr` is 4-byte-aligned device memory valid when the write runs.
    pub unsafe fn write_u32(&self, addr: sys::CUdeviceptr, value: u32) -> Result<()> {
        // SAFETY: the stream is live (held by `self`); `addr` as the caller guarantees.
        unsafe { raw::mem_op::write_u32(self.raw(), addr, value) }
    }

    /// Enqueues a wait, as a stream memory operation (no kernel), until
    /// `(int32_t)(*addr - value) >= 0`: later work on this stream waits for it.
    ///
    /// # Safety
    /// `addr` is 4-byte-aligned device memory (or mapped host memory) valid while the
    /// wait runs.
    pub unsafe fn wait_geq_u32(&self, addr: sys::CUdeviceptr, value: u32) -> Result<()> {
        // SAFETY: the stream is live (held by `self`); `addr` as the caller guarantees.
        unsafe { raw::mem_op::wait_geq_u32(self.raw(), addr, value) }
    }

    /// Whether this stream is being captured into a CUDA graph (`cuStreamIsCapturing`).
    pub fn capture_status(&self) -> CaptureStatus {
        // SAFETY: the stream is live (held by `self`); a stream of another context than the
        // current one only makes the query fail, which `Other` reports.
        unsafe { raw::capture::status(self.raw()) }
    }
}

/// The device address of `slice`, for kernels and raw copies. lowcon's contexts run
/// without cudarc's event tracking, so no synchronisation is attached to it; the caller
/// orders uses on streams itself.
pub fn device_ptr<T>(slice: &CudaSlice<T>) -> sys::CUdeviceptr {
    let (p, _no_tracking) = slice.device_ptr(slice.stream());
    p
}

/// One `T` in device memory (kernel reports, error records), read back with
/// [`DeviceRecord::read`].
#[derive(Debug)]
pub struct DeviceRecord<T: Pod> {
    bytes: CudaSlice<u8>,
    _t: std::marker::PhantomData<T>,
}

impl<T: Pod> DeviceRecord<T> {
    /// The device buffer holding the record, to pass to a kernel.
    pub fn buffer(&self) -> &CudaSlice<u8> {
        &self.bytes
    }

    /// Copies the record back (synchronises `stream`).
    pub fn read(&self, stream: &Stream) -> Result<T> {
        let v = stream.download(&self.bytes)?;
        Ok(bytemuck::pod_read_unaligned(&v))
    }
}

/// A CUDA event.
#[derive(Debug)]
pub struct Event {
    inner: CudaEvent,
}

impl Event {
    /// A new event on `device`; `timing` enables `elapsed_ms`.
    pub(crate) fn new(device: &Device, timing: bool) -> Result<Self> {
        let flags =
            if timing { sys::CUevent_flags::CU_EVENT_DEFAULT } else { sys::CUevent_flags::CU_EVENT_DISABLE_TIMING };
        let inner = device.cuda_context().new_event(Some(flags)).map_err(drv("cuEventCreate"))?;
        Ok(Event { inner })
    }

    /// Blocks until the work before the event's last record has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.synchronize().map_err(drv("cuEventSynchronize"))
    }

    /// Milliseconds between `self` and a later event `end` (both created with timing).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        self.inner.elapsed_ms(&end.inner).map_err(drv("cuEventElapsedTime"))
    }

    /// Whether the work before the event has finished, without blocking.
    pub fn is_complete(&self) -> Result<bool> {
        self.inner.try_is_complete().map_err(drv("cuEventQuery"))
    }
}

/// A CUDA graph captured from a [`Stream`] and instantiated: replay it with
/// [`Graph::launch`], or (with lowcon collectives in it) with
/// [`crate::group::gpu::GpuGroup::replay`], which also registers the replay with the group's
/// watchdog.
pub struct Graph {
    inner: cudarc::driver::CudaGraph,
    stream: Stream,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph").field("stream", &self.stream.raw()).finish()
    }
}

impl Stream {
    /// Starts capturing the work enqueued on this stream into a graph (thread-local
    /// capture mode: other threads' CUDA calls are not restricted).
    pub fn begin_capture(&self) -> Result<()> {
        self.inner
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(drv("cuStreamBeginCapture"))
    }

    /// Ends the capture begun by [`Stream::begin_capture`] and instantiates the graph.
    /// An empty capture is an error.
    pub fn end_capture(&self) -> Result<Graph> {
        let g = self
            .inner
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(drv("cuStreamEndCapture/cuGraphInstantiate"))?;
        let inner = g.ok_or_else(|| Error::InvalidArgument("the capture recorded no work: an empty graph".into()))?;
        Ok(Graph { inner, stream: self.clone() })
    }
}

impl Graph {
    /// Enqueues one replay on the stream it was captured from.
    pub fn launch(&self) -> Result<()> {
        self.inner.launch().map_err(drv("cuGraphLaunch"))
    }

    /// The graph's nodes by type: which kind of synchronisation its capture recorded
    /// (kernel waits are kernel nodes, stream-memop waits batch nodes).
    pub fn node_counts(&self) -> Result<NodeCounts> {
        // SAFETY: the graph lives as long as `self`.
        unsafe { raw::graph::node_counts(self.inner.cu_graph()) }
    }

    /// The stream the graph was captured from (and replays on).
    pub fn stream(&self) -> &Stream {
        &self.stream
    }
}

/// An executable graph lowcon captured for itself (NOTE [wire replays] in
/// `crate::coll::gpu::replays`): launched on any stream of its context, updated in place
/// from a new capture of the same shape, destroyed when dropped (a run in flight
/// finishes first).
pub(crate) struct Exec {
    exec: sys::CUgraphExec,
}

// SAFETY: an executable graph is a driver handle, usable from any thread of the process
// (the caller serialises its launches and updates: the channel lock).
unsafe impl Send for Exec {}

impl Exec {
    /// Captures what `record` enqueues on `stream` (which it may fork into other streams
    /// and join back, as a collective does), then instantiates it, or updates `reuse`
    /// with it when the driver can (`reuse` is consumed either way). The capture is
    /// ended on every path, so an error leaves `stream` usable.
    pub(crate) fn capture(
        stream: &Stream,
        reuse: Option<Exec>,
        record: impl FnOnce(&Stream) -> Result<()>,
    ) -> Result<Exec> {
        // SAFETY: `stream` is live and, being lowcon's own, not being captured.
        unsafe { raw::graph::begin_capture(stream.raw())? };
        let recorded = record(stream);
        // SAFETY: captured on this thread just above.
        let ended = unsafe { raw::graph::end_capture(stream.raw()) };
        // The recording's error first: an invalidated capture fails to end because of it.
        let graph = match ended {
            Ok(g) if !g.is_null() => g,
            Ok(_) => {
                recorded?;
                return Err(Error::InvalidArgument("lowcon's own capture recorded no work".into()));
            }
            Err(e) => {
                recorded?;
                return Err(e);
            }
        };
        if let Err(e) = recorded {
            // SAFETY: the graph just ended, owned here.
            let _ = unsafe { raw::graph::destroy_graph(graph) };
            return Err(e);
        }
        let made = match reuse {
            // SAFETY: both live; the exec is ours alone (consumed).
            Some(old) if unsafe { raw::graph::update(old.exec, graph) }.unwrap_or(false) => Ok(old),
            _ => {
                // SAFETY: `graph` is live.
                unsafe { raw::graph::instantiate(graph) }.map(|exec| Exec { exec })
            }
        };
        // SAFETY: instantiated or applied above; the executable graph does not need it.
        let _ = unsafe { raw::graph::destroy_graph(graph) };
        made
    }

    /// Enqueues one run on `stream` (of the context it was captured in).
    pub(crate) fn launch(&self, stream: &Stream) -> Result<()> {
        // SAFETY: both live; `stream` belongs to the group's context like the capture's.
        unsafe { raw::graph::launch(self.exec, stream.raw()) }
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        // SAFETY: owned here, never launched after.
        let _ = unsafe { raw::graph::destroy_exec(self.exec) };
    }
}
