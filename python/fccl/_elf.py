# SPDX-License-Identifier: Apache-2.0
"""The libraries a shared object was linked against, read from its ELF file (no readelf needed)."""
import struct
from typing import List


def _elf_needed(path) -> List[str]:
    """The DT_NEEDED names of an ELF64 little-endian shared object: the libraries it was linked against (its
    dynamic section, found through the section headers; only those parts are read). [] for anything else."""
    try:
        with open(path, "rb") as handle:
            def read(offset, size):
                handle.seek(offset)
                data = handle.read(size)
                if len(data) != size:
                    raise ValueError("truncated")
                return data

            header = read(0, 64)
            if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
                return []
            section_offset, = struct.unpack_from("<Q", header, 0x28)
            entry_size, count = struct.unpack_from("<HH", header, 0x3A)
            if entry_size != 64:
                return []
            table = read(section_offset, count * 64)
            # Elf64_Shdr: name, type, flags, addr, offset, size, link, info, addralign, entsize
            sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * 64) for i in range(count)]
            needed = []
            for section in sections:
                if section[1] != 6 or section[6] >= count:  # SHT_DYNAMIC, linked to its string table
                    continue
                strings_section = sections[section[6]]
                strings = read(strings_section[4], strings_section[5])
                dynamic = read(section[4], section[5] - section[5] % 16)
                for offset in range(0, len(dynamic), 16):
                    tag, value = struct.unpack_from("<qQ", dynamic, offset)
                    if tag == 0:  # DT_NULL
                        break
                    end = strings.find(b"\0", value)
                    if tag == 1 and end > value:  # DT_NEEDED
                        needed.append(strings[value:end].decode("utf-8", "replace"))
            return needed
    except (OSError, ValueError, struct.error):
        return []
