//! The host pad: the slots that stream-memop waits wait on, in host memory.
//!
//! NOTE [host pad]: a stream-memop wait (`cuStreamWaitValue32`) cannot time out, so a
//! peer that dies leaves it stuck until someone writes the slot. With the slot in device
//! memory, only the GPU could write it, that is, a driver call on another stream; and a
//! dead peer's calls fill the stream's queue, so those calls wait inside the driver
//! behind the caller's blocked enqueue, or their stream shares a hardware queue with a
//! stuck one (both seen on 2x H200: the survivor hung for good with memop sync). So
//! memop slots live in host memory: each rank's pad is a `memfd`, shared with every peer
//! over the socket mesh, mapped by every rank and registered with the driver
//! (`cuMemHostRegister`, device-mapped). A signal is one `cuStreamWriteValue32` into the
//! peer's host pad (the driver's default memory barrier orders it after the stream's
//! earlier work, copies to peers included); a wait polls this rank's own. Releasing a
//! stuck wait is then a plain store by this process, with no driver call at all, which
//! the watchdog and the sentinel can always make. Kernel waits keep their slots in the
//! symmetric device pad (they poll it from SMs) and give up on the abort word instead.

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU32, Ordering};

use cudarc::driver::sys;
use lowcon_abi::pad;

use crate::cuda::{Device, raw};
use crate::error::Result;
use crate::memory::gpu::Drain;
use crate::memory::host::{HostBuffer, alloc};
use crate::rendezvous::GroupCore;
use crate::sync::epoch_reached;

/// Every rank's memop slots, mapped into this process and into this GPU.
pub(crate) struct HostPad {
    slots: usize,
    /// The shared mappings (every rank's pad); unmapped after the registrations end, or
    /// never if the GPU may still use them.
    buf: ManuallyDrop<HostBuffer>,
    /// Device addresses of every rank's pad, as this GPU reaches them.
    dev: Vec<sys::CUdeviceptr>,
    /// How many of `buf`'s mappings are registered (all, unless creation failed).
    registered: usize,
    device: Device,
    drain: Drain,
}

const PAGE: usize = 4096;

impl HostPad {
    /// Collective: every rank's host pad, shared and registered.
    pub(crate) fn new(core: &GroupCore, device: &Device, drain: Drain) -> Result<Self> {
        let slots = pad::bytes(core.world as u32) / 4;
        let bytes = (slots * 4).next_multiple_of(PAGE);
        let buf = alloc(core, bytes, "the host pad")?;
        device.bind_to_thread()?;
        let mut me =
            Self { slots, buf: ManuallyDrop::new(buf), dev: Vec::new(), registered: 0, device: device.clone(), drain };
        for p in 0..core.world {
            // SAFETY: the mapping is page-aligned (mmap) and `bytes` is a multiple of the
            // page size; it stays mapped while `me.buf` lives, which `Drop` unregisters
            // before.
            let d = unsafe { raw::host_mem::register(me.buf.peer_ptr(p).cast::<c_void>(), bytes)? };
            me.dev.push(d);
            me.registered += 1;
        }
        Ok(me)
    }

    /// Every rank's host pad as this GPU addresses it (for a device array of them).
    pub(crate) fn dev_ptrs(&self) -> &[sys::CUdeviceptr] {
        &self.dev
    }

    /// Sets piece word `slot` of this rank's pad to `mask` (every awaited byte) unless
    /// it holds it already; returns whether it did (NOTE [bf16 wire]: a released wait's
    /// reduction resets the word, and the next call's wait on it needs it set again).
    pub(crate) fn release_piece(&self, slot: usize, mask: u32) -> bool {
        let s = self.own(slot);
        s.swap(mask, Ordering::AcqRel) != mask
    }

    /// The device address of `slot` in `owner`'s host pad.
    pub(crate) fn slot_dev(&self, owner: usize, slot: u32) -> sys::CUdeviceptr {
        self.dev[owner] + 4 * slot as u64
    }

    fn own(&self, slot: usize) -> &AtomicU32 {
        assert!(slot < self.slots, "slot {slot} outside the host pad of {} slots", self.slots);
        // SAFETY: in bounds (checked), 4-byte aligned (page-aligned base), and the shared
        // mapping lives as long as `self`; it is only ever accessed atomically here, and
        // by the GPUs' 4-byte writes.
        unsafe { AtomicU32::from_ptr(self.buf.local_ptr().cast::<u32>().add(slot)) }
    }

    /// This rank's slots as they are now.
    pub(crate) fn snapshot(&self) -> Vec<u32> {
        (0..self.slots).map(|s| self.own(s).load(Ordering::Acquire)).collect()
    }

    /// Sets graph flag `slot` of this rank's pad if it is 0 (NOTE [graph flags]); returns
    /// whether it was.
    pub(crate) fn release_flag(&self, slot: usize) -> bool {
        self.own(slot).compare_exchange(0, pad::GRAPH_SET, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Lets every wait for `epoch` (or earlier) on `slot` of this rank's pad complete,
    /// unless the slot already holds it or a later epoch.
    pub(crate) fn release(&self, slot: usize, epoch: u32) {
        let s = self.own(slot);
        let seen = s.load(Ordering::Acquire);
        if !epoch_reached(seen, epoch) {
            // A racing peer's older signal may overwrite this; the watchdog repeats its
            // release rounds while calls are in flight.
            let _ = s.compare_exchange(seen, epoch, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

impl Drop for HostPad {
    fn drop(&mut self) {
        // Memory the GPU may still use stays registered and mapped (the process's exit
        // reclaims it) rather than unregistered under a running wait.
        if self.registered > 0
            && (self.device.bind_to_thread().is_err() || self.drain.wait(&self.device, "the host pad").is_err())
        {
            return;
        }
        for p in 0..self.registered {
            // SAFETY: registered in `new`; the device is idle.
            let _ = unsafe { raw::host_mem::unregister(self.buf.peer_ptr(p).cast::<c_void>()) };
        }
        // SAFETY: dropped once, here, after every registration ended.
        unsafe { ManuallyDrop::drop(&mut self.buf) };
    }
}
