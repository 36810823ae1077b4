//! A record's payload as parts written back to back: a producer hands over buffers it already
//! holds (a batch's Arrow buffers, say) instead of copying them into one, and the commit thread
//! writes them with vectored I/O instead of copying them into its own buffer.

/// The bytes of one record, in parts.
#[derive(Default)]
pub struct Payload {
    parts: Vec<Box<dyn AsRef<[u8]> + Send + Sync>>,
    len: usize,
}

impl Payload {
    /// An empty payload.
    pub fn new() -> Self {
        Payload::default()
    }

    /// Appends `part` (kept, not copied).
    pub fn push(&mut self, part: impl AsRef<[u8]> + Send + Sync + 'static) {
        self.len += part.as_ref().len();
        self.parts.push(Box::new(part));
    }

    /// Total bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The parts in order.
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> {
        self.parts.iter().map(|p| (**p).as_ref())
    }
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Self {
        let mut payload = Payload::new();
        payload.push(bytes);
        payload
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Payload({} bytes in {} parts)",
            self.len,
            self.parts.len()
        )
    }
}
