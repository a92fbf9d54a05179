//! Images in tool results: kept beside the result's text for the providers that read images (Anthropic
//! Messages takes them inside a `tool_result`), described in that text for every other reader.
//!
//! A tool adds an image with [`ToolOutput::with_image`](crate::ToolOutput::with_image); the loop keeps it
//! in the call's [`ToolResult`](crate::ToolResult). Promises:
//! - A [`ToolImage`] is valid by construction and when read back from a stored suspension: PNG, JPEG, GIF
//!   or WebP (the types every image-reading provider takes), standard padded base64 whose first bytes are
//!   that type's signature, at most [`MAX_IMAGE_BASE64_BYTES`] of base64. A provider can send it as it is.
//! - A result's text describes each of its images where it stands (`[image: image/png, 12 KB]`), and
//!   each image it could not keep with why (`[image: image/svg+xml, 3 KB; not shown to the model: …]`).
//!   That text is what a provider without image input sends and what the event log keeps: events never
//!   hold image data, at any privacy level. The suspension keeps the images (it keeps the whole
//!   transcript), so a run resumed in another process sends them again; a result settled from the log
//!   after a crash (the execution ledger) has its text only.
//! - One result keeps at most [`MAX_RESULT_IMAGES`] images and [`MAX_RESULT_IMAGE_BYTES`] of base64 in all;
//!   the ones past that are described as left out.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The most base64 text one image may have: Anthropic's limit (5 MiB, counted on the base64), about
/// 3.75 MiB of image.
pub const MAX_IMAGE_BASE64_BYTES: usize = 5 * 1024 * 1024;

/// The most images one tool result keeps.
pub const MAX_RESULT_IMAGES: usize = 8;

/// The most base64 text the images of one tool result may have in all.
pub const MAX_RESULT_IMAGE_BYTES: usize = 10 * 1024 * 1024;

/// The image formats a result may carry to a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImageType {
    /// `image/png`
    Png,
    /// `image/jpeg`
    Jpeg,
    /// `image/gif`
    Gif,
    /// `image/webp`
    Webp,
}

impl ImageType {
    /// The type a media type names (`image/png`, `image/jpeg` or `image/jpg`, `image/gif`, `image/webp`;
    /// parameters and case ignored), if it is one of these.
    pub fn from_media_type(media_type: &str) -> Option<Self> {
        let essence = media_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        match essence.as_str() {
            "image/png" => Some(Self::Png),
            "image/jpeg" | "image/jpg" => Some(Self::Jpeg),
            "image/gif" => Some(Self::Gif),
            "image/webp" => Some(Self::Webp),
            _ => None,
        }
    }

    /// The media type as providers spell it.
    pub fn media_type(self) -> &'static str {
        match self {
            Self::Png => "image/png",
            Self::Jpeg => "image/jpeg",
            Self::Gif => "image/gif",
            Self::Webp => "image/webp",
        }
    }

    /// Whether `bytes` (an image's first bytes) start as this format's files do.
    fn signed(self, bytes: &[u8]) -> bool {
        match self {
            Self::Png => bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
            Self::Jpeg => bytes.starts_with(b"\xff\xd8\xff"),
            Self::Gif => bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a"),
            Self::Webp => bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP",
        }
    }
}

impl fmt::Display for ImageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.media_type())
    }
}

/// Why an image cannot go to a model; the result's text says so in its place.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageRefused {
    /// Not PNG, JPEG, GIF or WebP.
    #[error("only PNG, JPEG, GIF and WebP images are")]
    UnsupportedType,
    /// The data is not standard padded base64.
    #[error("its data is not base64")]
    NotBase64,
    /// The bytes do not start as the named type's do.
    #[error("its bytes are not of type {0}")]
    NotOfItsType(ImageType),
    /// Over [`MAX_IMAGE_BASE64_BYTES`].
    #[error("it is over the limit of 3.75 MB per image")]
    TooLarge,
    /// The result already holds [`MAX_RESULT_IMAGES`] images, or this one would take its images past
    /// [`MAX_RESULT_IMAGE_BYTES`].
    #[error("the result already holds its limit of 8 images, 7.5 MB in all")]
    ResultFull,
}

/// One image of a tool result, valid by construction (see the module's promises). Its `Debug` shows its
/// type and size, never its data.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StoredImage", into = "StoredImage")]
pub struct ToolImage {
    kind: ImageType,
    data: String,
}

/// A [`ToolImage`] as a suspension stores it: `{"media_type": "image/png", "data": "<base64>"}`.
#[derive(Serialize, Deserialize)]
struct StoredImage {
    media_type: String,
    data: String,
}

impl TryFrom<StoredImage> for ToolImage {
    type Error = ImageRefused;

    fn try_from(stored: StoredImage) -> Result<Self, Self::Error> {
        Self::new(&stored.media_type, stored.data)
    }
}

impl From<ToolImage> for StoredImage {
    fn from(image: ToolImage) -> Self {
        Self { media_type: image.kind.media_type().to_owned(), data: image.data }
    }
}

impl ToolImage {
    /// An image of `media_type` from its base64 (standard alphabet, padded), if a model can be given it.
    pub fn new(media_type: &str, base64: String) -> Result<Self, ImageRefused> {
        let kind = ImageType::from_media_type(media_type).ok_or(ImageRefused::UnsupportedType)?;
        if base64.len() > MAX_IMAGE_BASE64_BYTES {
            return Err(ImageRefused::TooLarge);
        }
        let start = base64.get(..base64.len().min(16)).ok_or(ImageRefused::NotBase64)?;
        let head = STANDARD.decode(start).map_err(|_| ImageRefused::NotBase64)?;
        if !kind.signed(&head) {
            return Err(ImageRefused::NotOfItsType(kind));
        }
        if !is_padded_base64(&base64) {
            return Err(ImageRefused::NotBase64);
        }
        Ok(Self { kind, data: base64 })
    }

    /// Its format.
    pub fn kind(&self) -> ImageType {
        self.kind
    }

    /// Its media type (`image/png`).
    pub fn media_type(&self) -> &'static str {
        self.kind.media_type()
    }

    /// Its bytes in base64 (standard alphabet, padded), as providers take them.
    pub fn base64(&self) -> &str {
        &self.data
    }

    /// The size of the image itself, in bytes.
    pub fn byte_len(&self) -> usize {
        image_size(&self.data)
    }

    /// How the result's text shows it: `[image: image/png, 12 KB]`.
    pub fn description(&self) -> String {
        format!("[image: {}, {}]", self.media_type(), size_text(self.byte_len()))
    }
}

impl fmt::Debug for ToolImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolImage").field("kind", &self.kind).field("bytes", &self.byte_len()).finish()
    }
}

/// How a result's text shows an image that was not kept: its type as given (escaped: it comes from the
/// tool), its size ([`image_size`] of its data) unless the data is not base64, and why.
pub(crate) fn refused_description(media_type: &str, size: usize, why: &ImageRefused) -> String {
    let media_type = media_type.escape_debug().to_string();
    match why {
        ImageRefused::NotBase64 => format!("[image: {media_type}; not shown to the model: {why}]"),
        _ => format!("[image: {media_type}, {}; not shown to the model: {why}]", size_text(size)),
    }
}

/// Bytes of image a base64 text holds (exact for padded base64).
pub(crate) fn image_size(base64: &str) -> usize {
    let padding = base64.bytes().rev().take(2).take_while(|&b| b == b'=').count();
    (base64.len() / 4 * 3).saturating_sub(padding)
}

/// Standard padded base64: whole 4-character groups of the standard alphabet, `=` only at the end.
fn is_padded_base64(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return false;
    }
    let body = bytes.strip_suffix(b"==").or_else(|| bytes.strip_suffix(b"=")).unwrap_or(bytes);
    body.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// `512 bytes`, `12 KB`, `3.4 MB` (units of 1,024).
pub(crate) fn size_text(bytes: usize) -> String {
    const KB: usize = 1024;
    const MB: usize = 1024 * 1024;
    if bytes < KB {
        format!("{bytes} bytes")
    } else if bytes < MB {
        format!("{} KB", bytes.div_ceil(KB))
    } else {
        let tenths = (bytes * 10).div_ceil(MB);
        format!("{}.{} MB", tenths / 10, tenths % 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PNG's signature and `len - 8` more bytes, in base64.
    fn png(len: usize) -> String {
        let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
        bytes.resize(len, 7);
        STANDARD.encode(bytes)
    }

    #[test]
    fn each_format_is_known_by_its_signature() {
        let cases: [(&str, &[u8]); 4] = [
            ("image/png", b"\x89PNG\r\n\x1a\nrest"),
            ("image/jpeg", b"\xff\xd8\xff\xe0rest"),
            ("image/gif", b"GIF89a rest"),
            ("IMAGE/WEBP; q=1", b"RIFF\x10\0\0\0WEBPVP8 "),
        ];
        for (media_type, bytes) in cases {
            let image = ToolImage::new(media_type, STANDARD.encode(bytes));
            assert!(image.is_ok(), "{media_type}: {image:?}");
        }
        assert_eq!(ImageType::from_media_type("image/jpg"), Some(ImageType::Jpeg));
        assert_eq!(
            ToolImage::new("image/png", STANDARD.encode(b"GIF89a rest")),
            Err(ImageRefused::NotOfItsType(ImageType::Png))
        );
        assert_eq!(
            ToolImage::new("image/webp", STANDARD.encode(b"RIFF")),
            Err(ImageRefused::NotOfItsType(ImageType::Webp))
        );
    }

    #[test]
    fn other_types_bad_base64_and_oversized_images_are_refused() {
        assert_eq!(ToolImage::new("image/svg+xml", STANDARD.encode("<svg/>")), Err(ImageRefused::UnsupportedType));
        assert_eq!(ToolImage::new("image/png", "not base64!".into()), Err(ImageRefused::NotBase64));
        let mut cut = png(100);
        cut.pop();
        assert_eq!(ToolImage::new("image/png", cut), Err(ImageRefused::NotBase64));
        let mut inside = png(100);
        inside.replace_range(40..41, "*");
        assert_eq!(ToolImage::new("image/png", inside), Err(ImageRefused::NotBase64));
        let largest = MAX_IMAGE_BASE64_BYTES / 4 * 3;
        assert!(ToolImage::new("image/png", png(largest)).is_ok());
        assert_eq!(ToolImage::new("image/png", png(largest + 1)), Err(ImageRefused::TooLarge));
        // Not valid UTF-8 boundaries at 16 bytes: refused, never a panic.
        assert_eq!(ToolImage::new("image/png", "ééééééééé".into()), Err(ImageRefused::NotBase64));
    }

    #[test]
    fn descriptions_give_type_and_size_never_data() {
        let image = ToolImage::new("image/png", png(12 * 1024)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(image.byte_len(), 12 * 1024);
        assert_eq!(image.description(), "[image: image/png, 12 KB]");
        assert_eq!(format!("{image:?}"), "ToolImage { kind: Png, bytes: 12288 }");
        assert_eq!(
            refused_description(
                "image/svg+xml",
                image_size(&STANDARD.encode([0u8; 3000])),
                &ImageRefused::UnsupportedType
            ),
            "[image: image/svg+xml, 3 KB; not shown to the model: only PNG, JPEG, GIF and WebP images are]"
        );
        assert_eq!(
            refused_description("image/png\n", 1, &ImageRefused::NotBase64),
            "[image: image/png\\n; not shown to the model: its data is not base64]"
        );
        assert_eq!(size_text(512), "512 bytes");
        // The limits the refusals name.
        assert_eq!(MAX_IMAGE_BASE64_BYTES / 4 * 3 * 100 / (1024 * 1024), 375);
        assert_eq!((MAX_RESULT_IMAGES, MAX_RESULT_IMAGE_BYTES / 4 * 3 * 10 / (1024 * 1024)), (8, 75));
        assert_eq!(size_text(3 * 1024 * 1024 + 1), "3.1 MB");
    }

    #[test]
    fn a_stored_image_is_checked_when_read_back() {
        let image = ToolImage::new("image/png", png(20)).unwrap_or_else(|e| panic!("{e}"));
        let json = serde_json::to_value(&image).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(json, serde_json::json!({"media_type": "image/png", "data": png(20)}));
        assert_eq!(serde_json::from_value::<ToolImage>(json).ok(), Some(image));
        let forged = serde_json::json!({"media_type": "image/png", "data": STANDARD.encode("<script>")});
        assert!(serde_json::from_value::<ToolImage>(forged).is_err());
    }
}
