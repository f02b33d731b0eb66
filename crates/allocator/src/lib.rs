//! Gives the scaler's freed memory back to the operating system.
//!
//! The scaler uses the system's allocator (glibc's `malloc` in the container image). glibc
//! returns only the top of each arena on its own: after thousands of ScaledObjects stop, their
//! freed histories and buffers stay resident, scattered through the arenas, until something
//! asks for them back. `serve` calls [`release_free_memory`] when loops have stopped, which
//! hands every free page of every arena back (`malloc_trim(0)`). Measured with 5,000
//! one-target ScaledObjects created and removed, this left 51-53 MiB resident where glibc
//! alone kept 234 MiB and mimalloc (the earlier default) 230 MiB, with a lower peak than
//! either (BENCHMARKS.md, "Memory that returns"). glibc's allocator costs 10-25 % more CPU
//! than mimalloc at 5,000 pods (0.70 against 0.60 cores in one sitting, 1.13 against 0.92 in
//! another).
//!
//! The workspace forbids unsafe code; the one foreign call below is the project's only unsafe
//! code.

/// Whether this build can give free memory back ([`release_free_memory`] does nothing
/// elsewhere): Linux with glibc.
pub const CAN_RELEASE: bool = cfg!(all(target_os = "linux", target_env = "gnu"));

/// Gives the allocator's free memory back to the operating system now; returns whether this
/// build knows how ([`CAN_RELEASE`]).
///
/// It walks every arena's free lists under the arena's lock, so it costs milliseconds with
/// hundreds of MiB resident: call it off the async threads, after memory was freed in bulk
/// (loops stopped), not on every scrape.
pub fn release_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` takes only a pad size, touches no memory of ours and locks
        // each arena while it walks it; glibc documents it as MT-Safe.
        #[allow(unsafe_code)]
        let _released = unsafe { libc::malloc_trim(0) };
    }
    CAN_RELEASE
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident memory of this process in KiB, from /proc (Linux).
    fn rss_kib() -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    #[test]
    fn releasing_gives_scattered_free_memory_back_and_keeps_live_blocks_intact() {
        // 4,096 blocks of 16 KiB (64 MiB, each under glibc's mmap threshold, so they live in
        // the heap), every other one kept: the freed half is scattered between live blocks,
        // where glibc's free alone cannot give it back.
        let mut blocks: Vec<Option<Vec<u8>>> = (0..4096)
            .map(|i| Some(vec![(i % 251) as u8; 16 * 1024]))
            .collect();
        for (i, block) in blocks.iter_mut().enumerate() {
            if i % 2 == 1 {
                *block = None;
            }
        }
        let before = rss_kib();
        assert_eq!(release_free_memory(), CAN_RELEASE);
        let after = rss_kib();
        for (i, block) in blocks.iter().enumerate() {
            if let Some(block) = block {
                assert!(
                    block.iter().all(|&b| b == (i % 251) as u8),
                    "block {i} changed"
                );
            }
        }
        if let (true, Some(before), Some(after)) = (CAN_RELEASE, before, after) {
            // About 32 MiB of freed 16 KiB blocks, three whole pages of each free: at least
            // 16 MiB must have gone back.
            assert!(
                before.saturating_sub(after) >= 16 * 1024,
                "RSS {before} KiB before the release, {after} KiB after"
            );
        }
        // The allocator still works after the release.
        let again = vec![9u8; 1 << 20];
        assert_eq!(again.iter().map(|&b| b as usize).sum::<usize>(), 9 << 20);
    }
}
