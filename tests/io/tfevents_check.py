"""Reads a TensorBoard log dir with TensorBoard's own EventAccumulator, for event_writer_test.cc.

  tfevents_check.py LOGDIR   prints {"file_version", "scalars", "histograms", "images"} as JSON
"""
import json
import struct
import sys
import zlib

from tensorboard.backend.event_processing import event_accumulator


def png_pixels(data):
    """Checks the PNG chunk CRCs and returns (width, height, color type, unfiltered pixel bytes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in PNG chunk {kind}"
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color = header[:4]
    assert depth == 8
    channels = {0: 1, 4: 2, 2: 3, 6: 4}[color]
    raw = zlib.decompress(idat)
    row = width * channels
    pixels = b""
    for y in range(height):
        line = raw[y * (row + 1):(y + 1) * (row + 1)]
        assert line[0] == 0, "only filter type 0 is expected"
        pixels += line[1:]
    return width, height, color, list(pixels)


def main(logdir):
    acc = event_accumulator.EventAccumulator(
        logdir, size_guidance={"scalars": 0, "histograms": 0, "images": 0})
    acc.Reload()
    tags = acc.Tags()
    out = {"file_version": acc.file_version, "scalars": {}, "histograms": {}, "images": {}}
    for tag in tags["scalars"]:
        out["scalars"][tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
    for tag in tags["histograms"]:
        out["histograms"][tag] = [{
            "step": e.step,
            "num": e.histogram_value.num,
            "min": e.histogram_value.min,
            "max": e.histogram_value.max,
            "sum": e.histogram_value.sum,
            "bucket_count": sum(e.histogram_value.bucket),
            "bucket_limit": list(e.histogram_value.bucket_limit),
            "bucket": list(e.histogram_value.bucket),
        } for e in acc.Histograms(tag)]
    for tag in tags["images"]:
        images = []
        for e in acc.Images(tag):
            width, height, color, pixels = png_pixels(e.encoded_image_string)
            images.append({"step": e.step, "width": e.width, "height": e.height,
                           "png_width": width, "png_height": height, "png_color": color,
                           "pixels": pixels})
        out["images"][tag] = images
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
