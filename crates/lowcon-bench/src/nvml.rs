//! NVML, loaded at run time (`libnvidia-ml.so.1` through libloading; cudarc 0.19.10 has
//! no NVML bindings): the SM clock, the clock-event (throttle) reasons and the energy
//! counter of this rank's GPU, which the saturated interference benchmark records during
//! every trial. A machine without NVML gets a note, not a failure: [`Nvml::open`]
//! returns why, and the benchmark goes on without these columns.
//!
//! NOTE [energy, not power]: on Hopper `nvmlDeviceGetPowerUsage` is a one-second
//! average, longer than a trial (~30 ms), so the benchmark reads the total-energy
//! counter (millijoules since the driver loaded) before and after each phase. The
//! counter only moves every so often (the run measures how often, [`Nvml::update_ms`],
//! and prints it): a 30 ms phase often sees no change, and one that does sees a whole
//! update's worth. So a phase's power is its energy summed over every trial over its
//! time summed over every trial ([`power_w`]), never a per-trial value: with updates
//! every U ms a phase that sums to T ms is within about U/T of its true mean, and an
//! update that lands in it may carry energy of the phase before. A phase whose counter
//! never moved has no power (`-`), not 0 W.

use std::ffi::{CStr, CString, c_char, c_uint, c_ulonglong, c_void};

use libloading::Library;

type Ret = c_uint;
type Dev = *mut c_void;
const SUCCESS: Ret = 0;
/// `NVML_CLOCK_SM`.
const CLOCK_SM: c_uint = 1;

struct Fns {
    shutdown: unsafe extern "C" fn() -> Ret,
    error_string: unsafe extern "C" fn(Ret) -> *const c_char,
    clock_info: unsafe extern "C" fn(Dev, c_uint, *mut c_uint) -> Ret,
    reasons: unsafe extern "C" fn(Dev, *mut c_ulonglong) -> Ret,
    energy: unsafe extern "C" fn(Dev, *mut c_ulonglong) -> Ret,
}

/// An initialised NVML and the handle of one GPU (shut down on drop).
pub struct Nvml {
    f: Fns,
    dev: Dev,
    // Last: the function pointers above point into it.
    _lib: Library,
}

/// One reading of the SM clock and the clock-event reasons.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub sm_mhz: u32,
    pub reasons: u64,
}

impl Nvml {
    /// Loads NVML and finds the GPU with this PCI bus id (e.g. `0000:18:00.0`, as
    /// [`lowcon::cuda::DeviceInfo`] has it: NVML's indices ignore `CUDA_VISIBLE_DEVICES`).
    pub fn open(pci_bus_id: &str) -> Result<Self, String> {
        let lib = ["libnvidia-ml.so.1", "libnvidia-ml.so"]
            .iter()
            // SAFETY: loading NVML runs no initialisers that depend on us.
            .find_map(|n| unsafe { Library::new(*n) }.ok())
            .ok_or("libnvidia-ml.so.1 could not be loaded")?;
        // SAFETY: each symbol is looked up with the C signature nvml.h declares for it.
        let sym = |name: &str| -> Result<*mut c_void, String> {
            // SAFETY: see above; only the address is taken here.
            let s = unsafe { lib.get::<*mut c_void>(name.as_bytes()) }.map_err(|e| format!("NVML {name}: {e}"))?;
            Ok(*s)
        };
        let reasons = sym("nvmlDeviceGetCurrentClocksEventReasons")
            .or_else(|_| sym("nvmlDeviceGetCurrentClocksThrottleReasons"))?;
        // SAFETY: the pointers are the named NVML functions, whose C signatures these are.
        let f = unsafe {
            Fns {
                shutdown: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> Ret>(sym("nvmlShutdown")?),
                error_string: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Ret) -> *const c_char>(sym(
                    "nvmlErrorString",
                )?),
                clock_info: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Dev, c_uint, *mut c_uint) -> Ret>(
                    sym("nvmlDeviceGetClockInfo")?,
                ),
                reasons: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Dev, *mut c_ulonglong) -> Ret>(
                    reasons,
                ),
                energy: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Dev, *mut c_ulonglong) -> Ret>(sym(
                    "nvmlDeviceGetTotalEnergyConsumption",
                )?),
            }
        };
        // SAFETY: nvmlInit_v2 and nvmlDeviceGetHandleByPciBusId_v2 have these signatures.
        let (init, by_bus) = unsafe {
            (
                std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> Ret>(sym("nvmlInit_v2")?),
                std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_char, *mut Dev) -> Ret>(sym(
                    "nvmlDeviceGetHandleByPciBusId_v2",
                )?),
            )
        };
        let mut me = Self { f, dev: std::ptr::null_mut(), _lib: lib };
        // SAFETY: no arguments; NVML counts init/shutdown pairs.
        let r = unsafe { init() };
        if r != SUCCESS {
            // Not initialised: do not call nvmlShutdown on drop.
            let msg = me.error("nvmlInit_v2", r);
            me.f.shutdown = noop_shutdown;
            return Err(msg);
        }
        let bus = CString::new(pci_bus_id).map_err(|e| format!("PCI bus id {pci_bus_id:?}: {e}"))?;
        // SAFETY: a NUL-terminated string and a valid out-pointer.
        let r = unsafe { by_bus(bus.as_ptr(), &mut me.dev) };
        if r != SUCCESS {
            return Err(format!("{} (bus id {pci_bus_id})", me.error("nvmlDeviceGetHandleByPciBusId_v2", r)));
        }
        Ok(me)
    }

    fn error(&self, call: &str, r: Ret) -> String {
        // SAFETY: nvmlErrorString returns a static string for any code (NULL is checked).
        let p = unsafe { (self.f.error_string)(r) };
        let msg = if p.is_null() {
            "unknown error".into()
        } else {
            // SAFETY: non-null, NUL-terminated, static.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        format!("{call}: {msg} (nvmlReturn {r})")
    }

    /// The SM clock (MHz) and the clock-event reason bits now.
    pub fn sample(&self) -> Result<Sample, String> {
        let (mut mhz, mut reasons) = (0, 0);
        // SAFETY: a live device handle and valid out-pointers.
        let r = unsafe { (self.f.clock_info)(self.dev, CLOCK_SM, &mut mhz) };
        if r != SUCCESS {
            return Err(self.error("nvmlDeviceGetClockInfo", r));
        }
        // SAFETY: as above.
        let r = unsafe { (self.f.reasons)(self.dev, &mut reasons) };
        if r != SUCCESS {
            return Err(self.error("nvmlDeviceGetCurrentClocksEventReasons", r));
        }
        Ok(Sample { sm_mhz: mhz, reasons })
    }

    /// How often the energy counter moves (ms): the median gap between the changes
    /// seen while polling it every 100 µs for `span`; `None` with fewer than 3 changes.
    pub fn update_ms(&self, span: std::time::Duration) -> Option<f64> {
        let t0 = std::time::Instant::now();
        let mut last = self.energy_mj().ok()?;
        let mut changes = Vec::new();
        while t0.elapsed() < span {
            std::thread::sleep(std::time::Duration::from_micros(100));
            let e = self.energy_mj().ok()?;
            if e != last {
                changes.push(t0.elapsed().as_secs_f64() * 1e3);
                last = e;
            }
        }
        let gaps: Vec<f64> = changes.windows(2).map(|w| w[1] - w[0]).collect();
        if gaps.len() < 2 {
            return None;
        }
        Some(crate::stats::median(&gaps))
    }

    /// The energy counter in millijoules (since the driver loaded).
    pub fn energy_mj(&self) -> Result<u64, String> {
        let mut e = 0;
        // SAFETY: a live device handle and a valid out-pointer.
        let r = unsafe { (self.f.energy)(self.dev, &mut e) };
        if r != SUCCESS {
            return Err(self.error("nvmlDeviceGetTotalEnergyConsumption", r));
        }
        Ok(e)
    }
}

unsafe extern "C" fn noop_shutdown() -> Ret {
    SUCCESS
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: pairs the successful nvmlInit_v2 of `open` (or is the no-op).
        let _ = unsafe { (self.f.shutdown)() };
    }
}

/// What the samples of one phase add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Samples {
    pub n: u32,
    pub mhz_sum: u64,
    pub mhz_min: u32,
    /// Every reason bit seen in any sample.
    pub reasons: u64,
}

impl Samples {
    pub fn add(&mut self, s: Sample) {
        self.mhz_min = if self.n == 0 { s.sm_mhz } else { self.mhz_min.min(s.sm_mhz) };
        self.n += 1;
        self.mhz_sum += s.sm_mhz as u64;
        self.reasons |= s.reasons;
    }

    /// Mean SM clock (MHz), `NaN` without samples.
    pub fn mean_mhz(&self) -> f64 {
        if self.n == 0 { f64::NAN } else { self.mhz_sum as f64 / self.n as f64 }
    }
}

/// The energy (mJ) between two counter readings, `NaN` if the counter went back.
pub fn delta_mj(e0_mj: u64, e1_mj: u64) -> f64 {
    if e1_mj < e0_mj { f64::NAN } else { (e1_mj - e0_mj) as f64 }
}

/// Mean power (W) of one phase on one rank: its energy (mJ) summed over trials over its
/// time (ms) summed over the same trials (trials without a reading, `NaN`, left out).
/// `NaN` when the counter never moved or nothing was read.
pub fn power_w(mj: &[f64], ms: &[f64]) -> f64 {
    let (e, t) = mj
        .iter()
        .zip(ms)
        .filter(|(e, t)| e.is_finite() && t.is_finite() && **t > 0.0)
        .fold((0.0, 0.0), |(se, st), (e, t)| (se + e, st + t));
    if e > 0.0 && t > 0.0 { e / t } else { f64::NAN }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_keep_mean_min_and_every_reason() {
        let mut s = Samples::default();
        assert!(s.mean_mhz().is_nan());
        s.add(Sample { sm_mhz: 1980, reasons: 0 });
        s.add(Sample { sm_mhz: 1830, reasons: 0x4 });
        s.add(Sample { sm_mhz: 1890, reasons: 0x1 });
        assert_eq!((s.n, s.mhz_min, s.reasons), (3, 1830, 0x5));
        assert_eq!(s.mean_mhz(), 1900.0);
    }

    #[test]
    fn power_sums_energy_and_time_over_trials() {
        assert_eq!(delta_mj(1_000_000, 1_021_000), 21_000.0);
        assert!(delta_mj(5, 4).is_nan());
        // A counter that moves every few trials: 0, 42 J, 0, 21 J over 4 × 30 ms is
        // 525 W, where the median of per-trial values would say 0 W or 700 W.
        assert_eq!(power_w(&[0.0, 42_000.0, 0.0, 21_000.0], &[30.0; 4]), 525.0);
        // Trials without a reading are left out; a counter that never moved is no power.
        assert_eq!(power_w(&[f64::NAN, 21_000.0], &[30.0, 30.0]), 700.0);
        assert!(power_w(&[0.0, 0.0], &[30.0, 30.0]).is_nan());
        assert!(power_w(&[], &[]).is_nan());
    }

    #[test]
    fn missing_or_gpuless_nvml_is_an_error_not_a_panic() {
        // Here either NVML is absent (an error naming the library) or present with no
        // such bus id (an error naming the bus id); both must come back as Err.
        match Nvml::open("ffff:ff:1f.7") {
            Ok(_) => panic!("no GPU has bus id ffff:ff:1f.7"),
            Err(e) => assert!(e.contains("libnvidia-ml") || e.contains("NVML") || e.contains("nvml"), "{e}"),
        }
    }
}
