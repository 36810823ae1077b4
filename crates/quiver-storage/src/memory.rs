//! How many bytes record batches hold. `RecordBatch::get_array_memory_size` counts every
//! buffer's whole allocation for every array that uses it; arrays read from one Arrow IPC
//! message all slice the message's single allocation, so a 21-column batch from a client
//! was counted 21 times over (and a slice of a large batch as the whole of it). These count
//! what is really there.

use std::collections::HashSet;

use arrow::array::{Array, ArrayData, RecordBatch};

/// The memory `batch` keeps alive: every distinct allocation its arrays use (buffers, null
/// bitmaps, children, dictionaries), counted once, at its capacity.
pub fn retained_bytes(batch: &RecordBatch) -> usize {
    let mut seen = HashSet::new();
    let mut total = 0;
    for column in batch.columns() {
        add_allocations(&column.to_data(), &mut seen, &mut total);
    }
    total
}

fn add_allocations(data: &ArrayData, seen: &mut HashSet<usize>, total: &mut usize) {
    let nulls = data.nulls().map(|n| n.buffer());
    for buffer in data.buffers().iter().chain(nulls) {
        if seen.insert(buffer.data_ptr().as_ptr() as usize) {
            // Memory owned elsewhere (a foreign allocation) reports no capacity: count its length.
            *total += buffer.capacity().max(buffer.len());
        }
    }
    for child in data.child_data() {
        add_allocations(child, seen, total);
    }
}

/// The bytes of `batch`'s rows themselves (its slices of the buffers it uses): about what an
/// Arrow IPC encoding of it takes.
pub fn data_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|c| {
            c.to_data()
                .get_slice_memory_size()
                .unwrap_or_else(|_| c.get_array_memory_size())
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Float64Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::ipc::reader::StreamReader;
    use arrow::ipc::writer::StreamWriter;

    use super::*;

    fn batch(rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Float64, false),
            Field::new("c", DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows)),
                Arc::new(Float64Array::from_iter_values((0..rows).map(|v| v as f64))),
                Arc::new(Int64Array::from_iter_values(0..rows)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn shared_allocations_count_once() {
        let original = batch(10_000);
        let mut ipc = Vec::new();
        let mut writer = StreamWriter::try_new(&mut ipc, &original.schema()).unwrap();
        writer.write(&original).unwrap();
        writer.finish().unwrap();
        drop(writer);
        let read = StreamReader::try_new(&ipc[..], None)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let rows = 3 * 10_000 * 8;
        // three arrays share one IPC body: naive counting sees it three times
        assert!(
            read.get_array_memory_size() >= 3 * rows,
            "{}",
            read.get_array_memory_size()
        );
        let retained = retained_bytes(&read);
        assert!(retained >= rows && retained < 2 * rows, "{retained}");
        assert_eq!(data_bytes(&read), rows);
        // separately allocated arrays: each counted
        assert!(retained_bytes(&original) >= rows);
        // a slice keeps its whole allocation alive but holds few rows
        let slice = original.slice(0, 10);
        assert!(retained_bytes(&slice) >= rows);
        assert_eq!(data_bytes(&slice), 3 * 10 * 8);
    }
}
