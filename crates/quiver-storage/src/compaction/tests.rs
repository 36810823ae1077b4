//! Tests of the compaction planner: tiers, crowded partitions, settling, which partitions count
//! as recently written, and property tests that small files stay bounded while written and
//! that settling converges.

use super::*;
use proptest::prelude::*;

const MIB: u64 = 1 << 20;

fn options() -> CompactionOptions {
    CompactionOptions {
        enabled: true,
        target_file_bytes: 64 * MIB,
        fanout: 4,
        idle: Duration::ZERO,
        max_small_files: 6,
        max_merge_bytes: 128 * MIB,
    }
}

fn file(id: u64, times: (i64, i64), bytes: u64, generation: u32) -> FileEntry {
    FileEntry {
        id,
        path: format!("f{id}"),
        partition_start_ns: 0,
        min_time_ns: times.0,
        max_time_ns: times.1,
        rows: bytes,
        bytes,
        generation,
        arrow_bytes: bytes,
    }
}

fn plan(files: &[FileEntry], settle: bool) -> Option<Range<usize>> {
    let refs: Vec<&FileEntry> = files.iter().collect();
    plan_partition(&refs, &options(), settle)
}

#[test]
fn tiers_merge_fanout_consecutive_small_files_of_the_lowest_generation() {
    let mut files: Vec<FileEntry> = (0..3)
        .map(|i| file(i, (i as i64, i as i64), MIB, 0))
        .collect();
    assert_eq!(plan(&files, false), None, "3 files of a fanout of 4");
    files.push(file(3, (3, 3), MIB, 0));
    assert_eq!(plan(&files, false), Some(0..4));
    // a generation-1 file breaks the run of generation-0 files
    let mixed: Vec<FileEntry> = [0, 0, 1, 0, 0, 0, 0]
        .iter()
        .enumerate()
        .map(|(i, g)| file(i as u64, (i as i64, i as i64), MIB, *g))
        .collect();
    assert_eq!(plan(&mixed, false), Some(3..7));
    // full files never take part in tiers
    let full: Vec<FileEntry> = (0..5)
        .map(|i| file(i, (i as i64, i as i64), 40 * MIB, 0))
        .collect();
    assert_eq!(plan(&full, false), None);
    assert_eq!(
        plan(&full, true),
        None,
        "full files that overlap nothing are settled"
    );
}

#[test]
fn only_recently_written_partitions_are_remembered() {
    let compactor = Compactor::new(CompactionOptions {
        idle: Duration::from_millis(50),
        ..options()
    });
    compactor.files_added([(1, 0), (1, 1)]);
    std::thread::sleep(Duration::from_millis(60));
    compactor.files_added([(2, 0)]);
    let remembered: Vec<(u64, i64)> = compactor.last_change.lock().keys().copied().collect();
    assert_eq!(remembered, vec![(2, 0)], "idle partitions are forgotten");
}

#[test]
fn crowded_partitions_merge_before_a_tier_is_complete() {
    // generations 2, 1, 1, 1, 0, 0, 0: seven small files, no run of 4 (the fanout)
    let generations = [2, 1, 1, 1, 0, 0, 0];
    let files: Vec<FileEntry> = generations
        .iter()
        .enumerate()
        .map(|(i, g)| file(i as u64, (i as i64, i as i64), MIB, *g))
        .collect();
    assert_eq!(
        plan(&files, false),
        Some(4..7),
        "the lowest generation's run"
    );
    assert_eq!(
        plan(&files[..6], false),
        None,
        "six small files are allowed"
    );
    // alternating generations: no run of one generation, so any run of small files
    let alternating: Vec<FileEntry> = (0..7)
        .map(|i| file(i, (i as i64, i as i64), MIB, (i % 2) as u32))
        .collect();
    assert_eq!(plan(&alternating, false), Some(0..7));
}

#[test]
fn settling_merges_small_and_overlapping_files_into_one_range() {
    let files = vec![
        file(1, (0, 10), 40 * MIB, 1),
        file(2, (11, 20), 40 * MIB, 1),
        file(3, (21, 22), MIB, 0),
        file(4, (23, 24), MIB, 0),
    ];
    assert_eq!(plan(&files, false), None);
    assert_eq!(plan(&files, true), Some(2..4));
    // late data overlapping the first full file pulls it (and what lies between) in
    let late = vec![
        file(1, (0, 10), 40 * MIB, 1),
        file(2, (11, 20), 40 * MIB, 1),
        file(3, (5, 6), MIB, 0),
    ];
    assert_eq!(plan(&late, true), Some(0..3));
    assert_eq!(plan(&late[..2], true), None);
}

#[test]
fn settling_too_much_at_once_merges_runs_of_small_files_only() {
    let files = vec![
        file(1, (0, 100), 60 * MIB, 1),
        file(2, (0, 100), 60 * MIB, 1),
        file(3, (0, 100), 60 * MIB, 1),
        file(4, (0, 100), 60 * MIB, 1),
        file(5, (0, 100), 60 * MIB, 1),
        file(6, (0, 1), MIB, 0),
        file(7, (2, 3), MIB, 0),
    ];
    assert_eq!(plan(&files, true), Some(5..7));
    assert_eq!(plan(&files[..5], true), None, "nothing affordable to merge");
}

fn arbitrary_partition() -> impl Strategy<Value = Vec<FileEntry>> {
    prop::collection::vec((0i64..1000, 0i64..200, 1u64..50, 0u32..3), 0..40).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (start, len, mib, g))| file(i as u64, (start, start + len), mib * MIB, g))
            .collect()
    })
}

proptest! {
    /// Persists (small generation-0 files) arriving one by one, with tier and crowding
    /// merges after each: the partition never holds more than `max_small_files` small
    /// files once the merges are done.
    #[test]
    fn small_files_stay_bounded_while_written(sizes in prop::collection::vec(1u64..4000, 1..120)) {
        let options = options();
        let mut files: Vec<FileEntry> = Vec::new();
        let mut next_id = 0;
        for (t, kib) in sizes.into_iter().enumerate() {
            next_id += 1;
            files.push(file(next_id, (t as i64, t as i64), kib << 10, 0));
            loop {
                let refs: Vec<&FileEntry> = files.iter().collect();
                let Some(range) = plan_partition(&refs, &options, false) else { break };
                let inputs = &files[range.clone()];
                let merged = file(
                    { next_id += 1; next_id },
                    (inputs[0].min_time_ns, inputs[inputs.len() - 1].max_time_ns),
                    inputs.iter().map(|f| f.bytes).sum(),
                    inputs.iter().map(|f| f.generation).max().unwrap() + 1,
                );
                files.splice(range, [merged]);
            }
            let small = files.iter().filter(|f| !options.is_full(f)).count();
            prop_assert!(small <= options.max_small_files, "{small} small files");
        }
    }

    /// Plans are ranges of at least two files that a merge can afford, and repeating
    /// settle merges (simulated) comes to an end: planning finds nothing more to do.
    /// (What is left is checked on real merges: `settling_merges_small_and_overlapping_
    /// files_into_one_range` and the store's compaction tests.)
    #[test]
    fn settling_converges(mut files in arbitrary_partition()) {
        let options = options();
        let mut next_id = 1000;
        for _ in 0..200 {
            let refs: Vec<&FileEntry> = files.iter().collect();
            let Some(range) = plan_partition(&refs, &options, true) else { break };
            prop_assert!(range.len() >= 2 && range.end <= files.len());
            let inputs: Vec<FileEntry> = files[range.clone()].to_vec();
            let bytes: u64 = inputs.iter().map(|f| f.bytes).sum();
            let memory: u64 = inputs.iter().map(|f| f.memory_bytes()).sum();
            prop_assert!(memory <= options.max_merge_bytes);
            let lo = inputs.iter().map(|f| f.min_time_ns).min().unwrap();
            let hi = inputs.iter().map(|f| f.max_time_ns).max().unwrap();
            let generation = inputs.iter().map(|f| f.generation).max().unwrap() + 1;
            // the merge's output: non-overlapping pieces of about the target size
            let pieces = bytes.div_ceil(options.target_file_bytes).max(1) as i64;
            let span = (hi - lo + 1).max(1);
            let outputs: Vec<FileEntry> = (0..pieces)
                .filter_map(|k| {
                    let a = lo + span * k / pieces;
                    let b = lo + span * (k + 1) / pieces - 1;
                    (a <= b).then(|| {
                        next_id += 1;
                        file(next_id, (a, b), bytes / pieces as u64, generation)
                    })
                })
                .collect();
            files.splice(range, outputs);
        }
        let refs: Vec<&FileEntry> = files.iter().collect();
        prop_assert_eq!(plan_partition(&refs, &options, true), None, "settling did not converge");
    }
}
