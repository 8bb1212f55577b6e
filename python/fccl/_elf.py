# SPDX-License-Identifier: Apache-2.0
"""What a shared object needs, read from its ELF file (no readelf needed): the libraries it was linked against, the
symbol versions it needs from them, and its machine. Standard library only: setup.py reads the library a wheel
carries with it, before the package is installed."""
import struct
from typing import Dict, List, Optional

_SHT_DYNAMIC = 6
_SHT_GNU_VERNEED = 0x6FFFFFFE
_MACHINES = {62: "x86_64", 183: "aarch64"}  # e_machine: EM_X86_64, EM_AARCH64


class _Elf:
    """An ELF64 little-endian file's section headers, and reads of its parts."""

    def __init__(self, handle):
        self.handle = handle
        header = self.read(0, 64)
        if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            raise ValueError("not an ELF64 little-endian file")
        self.machine, = struct.unpack_from("<H", header, 0x12)
        section_offset, = struct.unpack_from("<Q", header, 0x28)
        entry_size, count = struct.unpack_from("<HH", header, 0x3A)
        if entry_size != 64:
            raise ValueError("unexpected section header size")
        table = self.read(section_offset, count * 64)
        # Elf64_Shdr: name, type, flags, addr, offset, size, link, info, addralign, entsize
        self.sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * 64) for i in range(count)]

    def read(self, offset, size):
        self.handle.seek(offset)
        data = self.handle.read(size)
        if len(data) != size:
            raise ValueError("truncated")
        return data

    def of_type(self, kind):
        """(section, its linked string table's bytes) for each section of that type."""
        for section in self.sections:
            if section[1] == kind and section[6] < len(self.sections):
                strings = self.sections[section[6]]
                yield section, self.read(strings[4], strings[5])


def _string(strings, offset):
    end = strings.find(b"\0", offset)
    return strings[offset:end].decode("utf-8", "replace") if end > offset else ""


def _elf_needed(path) -> List[str]:
    """The DT_NEEDED names of an ELF64 little-endian shared object: the libraries it was linked against (its
    dynamic section, found through the section headers; only those parts are read). [] for anything else."""
    try:
        with open(path, "rb") as handle:
            elf = _Elf(handle)
            needed = []
            for section, strings in elf.of_type(_SHT_DYNAMIC):
                dynamic = elf.read(section[4], section[5] - section[5] % 16)
                for offset in range(0, len(dynamic), 16):
                    tag, value = struct.unpack_from("<qQ", dynamic, offset)
                    if tag == 0:  # DT_NULL
                        break
                    if tag == 1 and _string(strings, value):  # DT_NEEDED
                        needed.append(_string(strings, value))
            return needed
    except (OSError, ValueError, struct.error):
        return []


def _elf_version_needs(path) -> Dict[str, List[str]]:
    """{library: [symbol versions needed from it]} from the GNU version-needs section (.gnu.version_r), e.g.
    {"libc.so.6": ["GLIBC_2.17", "GLIBC_2.34"]}. {} for anything else."""
    try:
        with open(path, "rb") as handle:
            elf = _Elf(handle)
            needs = {}
            for section, strings in elf.of_type(_SHT_GNU_VERNEED):
                data = elf.read(section[4], section[5])
                offset = 0
                for _ in range(section[7]):  # sh_info: the number of Elf64_Verneed entries
                    _, count, file_name, aux, next_entry = struct.unpack_from("<HHIII", data, offset)
                    versions = needs.setdefault(_string(strings, file_name), [])
                    aux_offset = offset + aux
                    for _ in range(count):  # Elf64_Vernaux: hash, flags, other, name, next
                        _, _, _, name, next_aux = struct.unpack_from("<IHHII", data, aux_offset)
                        versions.append(_string(strings, name))
                        aux_offset += next_aux
                    if next_entry == 0:
                        break
                    offset += next_entry
            return needs
    except (OSError, ValueError, struct.error):
        return {}


def _elf_machine(path) -> Optional[str]:
    """The machine a shared object is for, as wheel platform tags spell it ("x86_64", "aarch64"); None for others."""
    try:
        with open(path, "rb") as handle:
            return _MACHINES.get(_Elf(handle).machine)
    except (OSError, ValueError, struct.error):
        return None
