//! Calls of a group from inside a released reduce-scatter's producer (NOTE [release
//! rounds] in `coll/gpu/per_piece/released.rs`), which runs while its call holds the channel (and
//! the bindings their locks): such a call would wait for them forever, so it is refused.

use std::cell::Cell;

use crate::error::{Error, Result};

thread_local! {
    /// Set while a released reduce-scatter's producer runs on this thread.
    static PRODUCING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `produce` with this thread marked as inside a producer.
pub(crate) fn producing<T>(produce: impl FnOnce() -> T) -> T {
    let outer = PRODUCING.with(|p| p.replace(true));
    let r = produce();
    PRODUCING.with(|p| p.set(outer));
    r
}

/// Refuses a call of a group made from inside a producer (`producing`).
pub(crate) fn refuse_inside_producer(rank: usize) -> Result<()> {
    if PRODUCING.with(Cell::get) {
        return Err(Error::InvalidArgument(format!(
            "rank {rank}: a call of the group from inside a released reduce-scatter's producer: produce(d) must \
             only enqueue the work that writes chunk d (the call holds the group until it returns)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_inside_a_producer_are_refused_and_outside_allowed() {
        assert!(refuse_inside_producer(3).is_ok());
        let inside = producing(|| refuse_inside_producer(3));
        let msg = inside.expect_err("refused").to_string();
        assert!(msg.contains("rank 3") && msg.contains("producer"), "{msg}");
        assert!(refuse_inside_producer(3).is_ok(), "the mark is cleared after the producer");
    }
}
