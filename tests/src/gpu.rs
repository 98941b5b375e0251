//! Single-GPU checks of the kernel pipeline: a vector add and a system-scope flag round
//! trip between two kernels on two streams, both against CPU expectations.

use lowcon::Error;
use lowcon::cuda::{Device, RoundTripBuffers, StreamPriority};
use lowcon_abi::{ErrorRecord, status};
use rand::Rng;

fn e(err: Error) -> String {
    err.to_string()
}

/// `out = a + b` on `n` fresh random f32s; the output is poisoned with NaN bytes first.
/// f32 addition is correctly rounded on both sides, so the comparison is exact.
pub fn vec_add(device: &Device, n: usize) -> Result<String, String> {
    let mut rng = rand::rng();
    let a: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0e3f32..1.0e3)).collect();
    let b: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0e3f32..1.0e3)).collect();
    let stream = device.stream(StreamPriority::Default).map_err(e)?;
    let da = stream.upload(&a).map_err(e)?;
    let db = stream.upload(&b).map_err(e)?;
    let mut out = stream.alloc_zeros::<f32>(n).map_err(e)?;
    stream.fill_bytes(&mut out, 0xFF).map_err(e)?; // 0xFFFFFFFF is a NaN
    device.kernels().map_err(e)?.vec_add_f32(&stream, &da, &db, &mut out).map_err(e)?;
    let got = stream.download(&out).map_err(e)?;
    let mut wrong = 0usize;
    let mut first = None;
    for i in 0..n {
        let want = a[i] + b[i];
        if got[i].to_bits() != want.to_bits() {
            wrong += 1;
            first.get_or_insert((i, got[i], want));
        }
    }
    match first {
        None => Ok(format!("{n} elements exact")),
        Some((i, g, w)) => Err(format!("{wrong} of {n} wrong; first at {i}: got {g} want {w}")),
    }
}

/// Two kernels on two streams exchange `rounds` payloads of `words` random words,
/// each published with `st.release.sys` and picked up with `ld.acquire.sys`. Every
/// word of every round is checked on the device; the host checks the counters.
pub fn flag_round_trip(device: &Device, words: usize, rounds: u32) -> Result<String, String> {
    let seed: u64 = rand::rng().random();
    let s0 = device.stream(StreamPriority::High).map_err(e)?;
    let s1 = device.stream(StreamPriority::High).map_err(e)?;
    let bufs = RoundTripBuffers::new(&s0, words).map_err(e)?;
    // The payloads start zeroed, a pattern no round writes (but with odds of 2^-32 per
    // word), so a round whose data never became visible fails the device-side check.
    s0.synchronize().map_err(e)?;
    let k = device.kernels().map_err(e)?;
    let timeout_ns = 10_000_000_000; // 10 s: far beyond any healthy round trip
    let t0 = s0.event(true).map_err(e)?;
    let t1 = s0.event(true).map_err(e)?;
    s0.record(&t0).map_err(e)?;
    // The responder first, so it is resident before the first mover publishes.
    k.flag_round_trip(&s1, 1, &bufs, rounds, seed, timeout_ns).map_err(e)?;
    k.flag_round_trip(&s0, 0, &bufs, rounds, seed, timeout_ns).map_err(e)?;
    s0.record(&t1).map_err(e)?;
    s0.synchronize().map_err(e)?;
    s1.synchronize().map_err(e)?;
    let err: ErrorRecord = bufs.error.read(&s0).map_err(e)?;
    if err.code != status::OK {
        return Err(Error::DeviceTimeout(err).to_string());
    }
    let r0 = bufs.report[0].read(&s0).map_err(e)?;
    let r1 = bufs.report[1].read(&s0).map_err(e)?;
    if r0.rounds_done != rounds || r1.rounds_done != rounds {
        return Err(format!("rounds done: ping {} pong {} of {rounds}", r0.rounds_done, r1.rounds_done));
    }
    if r0.mismatches != 0 || r1.mismatches != 0 {
        return Err(format!("payload mismatches: ping saw {}, pong saw {}", r0.mismatches, r1.mismatches));
    }
    let ms = t0.elapsed_ms(&t1).map_err(e)?;
    Ok(format!("{rounds} rounds x {words} words, 0 mismatches, {:.2} us/round trip", ms as f64 * 1e3 / rounds as f64))
}

/// Launches only the first mover, so its wait can never complete: the kernel must give
/// up after `timeout_ns`, write an error record naming the missing peer, and return
/// (the stream synchronises instead of hanging).
pub fn wait_timeout_reports_peer(device: &Device) -> Result<String, String> {
    let s0 = device.stream(StreamPriority::High).map_err(e)?;
    let bufs = RoundTripBuffers::new(&s0, 64).map_err(e)?;
    let timeout_ns = 50_000_000; // 50 ms
    let started = std::time::Instant::now();
    device.kernels().map_err(e)?.flag_round_trip(&s0, 0, &bufs, 3, 7, timeout_ns).map_err(e)?;
    s0.synchronize().map_err(e)?;
    let waited = started.elapsed();
    let err: ErrorRecord = bufs.error.read(&s0).map_err(e)?;
    let want =
        ErrorRecord { code: status::WAIT_TIMEOUT, rank: 0, peer: 1, channel: 0, expected: 1, observed: 0, ..err };
    if err != want {
        return Err(format!("unexpected error record {err:?}"));
    }
    if err.waited_ns < timeout_ns || waited.as_secs_f64() > 5.0 {
        return Err(format!(
            "timeout not honoured: waited {} ns on the device, {:?} on the host",
            err.waited_ns, waited
        ));
    }
    let msg = Error::DeviceTimeout(err).to_string();
    if !msg.contains("peer 1") {
        return Err(format!("error message does not name the peer: {msg}"));
    }
    Ok(format!("kernel gave up after {:.1} ms: {msg}", err.waited_ns as f64 * 1e-6))
}

/// A bad device index is an error that names it, not a panic.
pub fn bad_device_index() -> Result<String, String> {
    let n = lowcon::cuda::device_count().map_err(e)?;
    match Device::open(n) {
        Err(err @ Error::NoSuchDevice { .. }) if err.to_string().contains(&format!("device {n}")) => {
            Ok(err.to_string())
        }
        Err(other) => Err(format!("wrong error: {other}")),
        Ok(_) => Err(format!("device {n} opened although only {n} are visible")),
    }
}

/// Every check in this module, in order. `quick` shrinks the sizes (for runs under
/// compute-sanitizer, which slows kernels by orders of magnitude).
pub fn all_checks(device: &Device, quick: bool) -> Vec<crate::Outcome> {
    use crate::run_check;
    let (big, rounds) = if quick { (1 << 20, 200) } else { (64 << 20, 10_000) };
    vec![
        run_check("vec_add_f32[n=1]", || vec_add(device, 1)),
        run_check("vec_add_f32[n=1000003]", || vec_add(device, 1_000_003)),
        run_check(format!("vec_add_f32[n={}Mi, {} MiB/buffer]", big >> 20, big >> 18), || vec_add(device, big)),
        run_check(format!("flag_round_trip[4096 words x {rounds}]"), || flag_round_trip(device, 4096, rounds)),
        run_check("wait_timeout_reports_peer", || wait_timeout_reports_peer(device)),
        run_check("bad_device_index", bad_device_index),
    ]
}
