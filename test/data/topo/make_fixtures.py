#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the recorded-machine hwloc XMLs used by the fccl-topo golden tests (README.md says where each fact is from).

    python3 test/data/topo/make_fixtures.py test/data/topo

two-socket.xml  hwloc's own test topology tests/hwloc/xml/32em64t-2n8c2t-pci-normalio.xml (a Supermicro X9DRG-HF
                with two Xeon E5-2650 and three Tesla M2075), transcribed object by object in hwloc's v2 XML format.
dgx-h100.xml    an 8-GPU NVSwitch node laid out like a DGX H100, from public nvidia-smi / NCCL dumps.

Only the standard library; the output is deterministic (the tests compare fccl-topo's output on it byte for byte).
"""
import os
import sys


class Writer:
    def __init__(self):
        self.lines = []
        self.gp = 0
        self.depth = 1

    def gp_index(self):
        self.gp += 1
        return self.gp

    def line(self, text):
        self.lines.append("  " * self.depth + text)

    def open(self, attrs):
        self.line("<object %s>" % attrs)
        self.depth += 1

    def close(self):
        self.depth -= 1
        self.line("</object>")

    def leaf(self, attrs):
        self.line("<object %s/>" % attrs)

    def info(self, name, value):
        self.line('<info name="%s" value="%s"/>' % (name, value))


def bitmap(bits):
    """hwloc's bitmap text: 32-bit words, most significant first, "0x" each, leading zero words dropped."""
    value = 0
    for b in bits:
        value |= 1 << b
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if value == 0:
            break
    return ",".join("0x%08x" % w for w in reversed(words))


def sets(cpus, nodes, complete=True):
    c, n = bitmap(cpus), bitmap(nodes)
    return 'cpuset="%s" complete_cpuset="%s" nodeset="%s" complete_nodeset="%s"' % (c, c, n, n)


def pci_type(cls, vendor, device, subvendor, subdevice, rev):
    return "%04x [%04x:%04x] [%04x:%04x] %02x" % (cls, vendor, device, subvendor, subdevice, rev)


def bridge(w, busid, lo, hi, ids, speed, depth, infos=()):
    w.open('type="Bridge" gp_index="%d" bridge_type="1-1" depth="%d" bridge_pci="0000:[%02x-%02x]" pci_busid="%s" '
           'pci_type="%s" pci_link_speed="%f"' % (w.gp_index(), depth, lo, hi, busid, pci_type(0x0604, *ids), speed))
    for name, value in infos:
        w.info(name, value)


def pcidev(w, busid, cls, ids, speed, infos=(), osdevs=()):
    attrs = 'type="PCIDev" gp_index="%d" pci_busid="%s" pci_type="%s" pci_link_speed="%f"' % (
        w.gp_index(), busid, pci_type(cls, *ids), speed)
    if not infos and not osdevs:
        w.leaf(attrs)
        return
    w.open(attrs)
    for name, value in infos:
        w.info(name, value)
    for name, osdev_type, subtype, osinfos in osdevs:
        sub = ' subtype="%s"' % subtype if subtype else ""
        attrs = 'type="OSDev" gp_index="%d" name="%s"%s osdev_type="%d"' % (w.gp_index(), name, sub, osdev_type)
        if osinfos:
            w.open(attrs)
            for k, v in osinfos:
                w.info(k, v)
            w.close()
        else:
            w.leaf(attrs)
    w.close()


OSDEV_BLOCK, OSDEV_GPU, OSDEV_NETWORK, OSDEV_OPENFABRICS, OSDEV_COPROC = 0, 1, 2, 3, 5


def document(w, machine_attrs, body, distances):
    out = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
           '<topology version="2.0">']
    out += w.lines
    if distances:
        out += distances
    out.append("</topology>")
    return "\n".join(out) + "\n"


def cores_with_caches(w, cores, node, l2=262144, l1=32768, l2_assoc=8):
    """Core objects (each under its own L2 and L1d) for cores = [(core_os_index, [pu, pu]), ...]."""
    for core, pus in cores:
        w.open('type="L2Cache" %s gp_index="%d" cache_size="%d" depth="2" cache_linesize="64" '
               'cache_associativity="%d" cache_type="0"' % (sets(pus, [node]), w.gp_index(), l2, l2_assoc))
        w.open('type="L1Cache" %s gp_index="%d" cache_size="%d" depth="1" cache_linesize="64" '
               'cache_associativity="8" cache_type="0"' % (sets(pus, [node]), w.gp_index(), l1))
        w.open('type="Core" os_index="%d" %s gp_index="%d"' % (core, sets(pus, [node]), w.gp_index()))
        for pu in pus:
            w.leaf('type="PU" os_index="%d" %s gp_index="%d"' % (pu, sets([pu], [node]), w.gp_index()))
        w.close()
        w.close()
        w.close()


def two_socket():
    """hwloc tests/hwloc/xml/32em64t-2n8c2t-pci-normalio.xml: Supermicro X9DRG-HF, 2x Xeon E5-2650 (8 cores, 2 threads),
    PU i and i+16 are the two threads of core i%8 of package i//8."""
    w = Writer()
    all_cpus = list(range(32))
    w.lines.append('  <object type="Machine" os_index="0" %s allowed_cpuset="%s" allowed_nodeset="%s" gp_index="%d">' %
                   (sets(all_cpus, [0, 1]), bitmap(all_cpus), bitmap([0, 1]), w.gp_index()))
    w.depth = 2
    for name, value in [("DMIProductName", "X9DRG-HF"), ("DMIProductVersion", "0123456789"),
                        ("DMIBoardVendor", "Supermicro"), ("DMIBoardName", "X9DRG-HF"),
                        ("DMIBoardVersion", "0123456789"), ("DMIBoardAssetTag", "To be filled by O.E.M."),
                        ("DMIChassisVendor", "Supermicro"), ("DMIChassisType", "3"),
                        ("DMIChassisVersion", "0123456789"), ("DMIChassisAssetTag", "To Be Filled By O.E.M."),
                        ("DMIBIOSVendor", "American Megatrends Inc."), ("DMIBIOSVersion", "1.0c"),
                        ("DMIBIOSDate", "08/22/2012"), ("DMISysVendor", "Supermicro"), ("Backend", "Linux"),
                        ("OSName", "Linux"), ("OSRelease", "3.2.0-4-amd64"), ("OSVersion", "#1 SMP Debian 3.2.32-1"),
                        ("HostName", "conan"), ("Architecture", "x86_64")]:
        w.info(name, value)
    memory = [34330173440, 34359738368]
    pages = [8381390, 8388608]
    for pkg in range(2):
        cpus = [c for c in all_cpus if (c // 8) % 2 == pkg]
        w.open('type="Package" os_index="%d" %s gp_index="%d"' % (pkg, sets(cpus, [pkg]), w.gp_index()))
        w.info("CPUModel", "Intel(R) Xeon(R) CPU E5-2650 0 @ 2.00GHz")
        w.info("CPUType", "x86_64")
        w.open('type="NUMANode" os_index="%d" %s gp_index="%d" local_memory="%d"' %
               (pkg, sets(cpus, [pkg]), w.gp_index(), memory[pkg]))
        w.line('<page_type size="4096" count="%d"/>' % pages[pkg])
        w.line('<page_type size="2097152" count="0"/>')
        w.close()
        w.open('type="L3Cache" %s gp_index="%d" cache_size="20971520" depth="3" cache_linesize="64" '
               'cache_associativity="20" cache_type="0"' % (sets(cpus, [pkg]), w.gp_index()))
        cores_with_caches(w, [(c, [8 * pkg + c, 8 * pkg + c + 16]) for c in range(8)], pkg)
        w.close()
        if pkg == 0:
            w.open('type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="0000:[00-05]"' % w.gp_index())
            bridge(w, "0000:00:03.0", 0x03, 0x03, (0x8086, 0x3c08, 0x000f, 0x0000, 0x07), 0.0, 1,
                   [("PCIVendor", "Intel Corporation"),
                    ("PCIDevice", "Xeon E5/Core i7 IIO PCI Express Root Port 3a in PCI Express Mode")])
            pcidev(w, "0000:03:00.0", 0x0302, (0x10de, 0x1094, 0x00de, 0x0088, 0xa1), 0.0,
                   [("PCIVendor", "NVIDIA Corporation"),
                    ("PCIDevice", "Tesla M2075 Dual-Slot Computing Processor Module")])
            w.close()
            bridge(w, "0000:00:11.0", 0x04, 0x04, (0x8086, 0x1d3e, 0x000f, 0x0000, 0x06), 0.0, 1,
                   [("PCIVendor", "Intel Corporation"),
                    ("PCIDevice", "C600/X79 series chipset PCI Express Virtual Root Port")])
            pcidev(w, "0000:04:00.0", 0x0107, (0x8086, 0x1d6b, 0x00d9, 0x0062, 0x06), 0.0,
                   [("PCIVendor", "Intel Corporation"), ("PCIDevice", "C602 chipset 4-Port SATA Storage Control Unit")])
            w.close()
            bridge(w, "0000:00:1e.0", 0x05, 0x05, (0x8086, 0x244e, 0x0000, 0x0000, 0xa6), 0.0, 1,
                   [("PCIVendor", "Intel Corporation"), ("PCIDevice", "82801 PCI Bridge")])
            pcidev(w, "0000:05:03.0", 0x0300, (0x102b, 0x0532, 0x00d9, 0x0062, 0x0a), 0.0,
                   [("PCIVendor", "Matrox Electronics Systems Ltd."), ("PCIDevice", "MGA G200eW WPCM450")])
            w.close()
            pcidev(w, "0000:00:1f.2", 0x0106, (0x8086, 0x1d02, 0x00d9, 0x0062, 0x06), 0.0,
                   [("PCIVendor", "Intel Corporation"),
                    ("PCIDevice", "C600/X79 series chipset 6-Port SATA AHCI Controller")],
                   [("sda", OSDEV_BLOCK, "Disk", [])])
            w.close()
        else:
            w.open('type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="0000:[80-84]"' % w.gp_index())
            bridge(w, "0000:80:01.0", 0x81, 0x82, (0x8086, 0x3c02, 0x0000, 0x0000, 0x07), 0.0, 1,
                   [("PCIVendor", "Intel Corporation"), ("PCIDevice", "Xeon E5/Core i7 IIO PCI Express Root Port 1a")])
            for func, eth, mac in [(0, "eth0", "00:25:90:95:71:12"), (1, "eth1", "00:25:90:95:71:13")]:
                pcidev(w, "0000:81:00.%d" % func, 0x0200, (0x8086, 0x1521, 0x00d9, 0x0021, 0x01), 0.0,
                       [("PCIVendor", "Intel Corporation"), ("PCIDevice", "I350 Gigabit Network Connection")],
                       [(eth, OSDEV_NETWORK, None, [("Address", mac)])])
            w.close()
            bridge(w, "0000:80:02.0", 0x83, 0x83, (0x8086, 0x3c04, 0x001f, 0x0000, 0x07), 0.0, 1,
                   [("PCIVendor", "Intel Corporation"), ("PCIDevice", "Xeon E5/Core i7 IIO PCI Express Root Port 2a")])
            pcidev(w, "0000:83:00.0", 0x0302, (0x10de, 0x1094, 0x00de, 0x0088, 0xa1), 0.0,
                   [("PCIVendor", "NVIDIA Corporation"),
                    ("PCIDevice", "Tesla M2075 Dual-Slot Computing Processor Module")])
            w.close()
            bridge(w, "0000:80:03.0", 0x84, 0x84, (0x8086, 0x3c08, 0x001f, 0x0000, 0x07), 0.0, 1,
                   [("PCIVendor", "Intel Corporation"),
                    ("PCIDevice", "Xeon E5/Core i7 IIO PCI Express Root Port 3a in PCI Express Mode")])
            pcidev(w, "0000:84:00.0", 0x0302, (0x10de, 0x1094, 0x00de, 0x0088, 0xa1), 0.0,
                   [("PCIVendor", "NVIDIA Corporation"),
                    ("PCIDevice", "Tesla M2075 Dual-Slot Computing Processor Module")],
                   [("cuda0", OSDEV_COPROC, "CUDA", [("Backend", "CUDA"), ("GPUVendor", "NVIDIA Corporation"),
                                                     ("GPUModel", "Tesla K40m"), ("CUDAGlobalMemorySize", "11796032"),
                                                     ("CUDAL2CacheSize", "1536"), ("CUDAMultiProcessors", "15"),
                                                     ("CUDACoresPerMP", "192"), ("CUDASharedMemorySizePerMP", "48")]),
                    ("card0", OSDEV_GPU, None, [])])
            pcidev(w, "0000:84:00.1", 0x0300, (0x1002, 0x6798, 0x174b, 0xe208, 0x00), 0.0,
                   [("PCIVendor", "Advanced Micro Devices, Inc. [AMD/ATI]"),
                    ("PCIDevice", "Tahiti XT [Radeon HD 7970/8970 OEM / R9 280X]")],
                   [("opencl0d1", OSDEV_COPROC, "OpenCL",
                     [("Backend", "OpenCL"), ("OpenCLDeviceType", "GPU"), ("GPUVendor", "Advanced Micro Devices, Inc."),
                      ("GPUModel", "AMD Radeon R9 200 / HD 7900 Series"), ("OpenCLPlatformIndex", "0"),
                      ("OpenCLPlatformName", "AMD Accelerated Parallel Processing"),
                      ("OpenCLPlatformDeviceIndex", "1"), ("OpenCLComputeUnits", "32"),
                      ("OpenCLGlobalMemorySize", "3087360")])])
            pcidev(w, "0000:04:00.0", 0x0207, (0x15b3, 0x1013, 0x15b3, 0x0013, 0x00), 0.0,
                   [("PCIVendor", "Mellanox Technologies"), ("PCIDevice", "MT27700 Family [ConnectX-4]")],
                   [("ib0", OSDEV_NETWORK, None,
                     [("Address", "80:00:00:26:fe:80:00:00:00:00:00:00:24:8a:07:03:00:1e:39:fe"), ("Port", "1")]),
                    ("mlx5_0", OSDEV_OPENFABRICS, None,
                     [("NodeGUID", "248a:0703:001e:39fe"), ("SysImageGUID", "248a:0703:001e:39fe"),
                      ("Port1State", "4"), ("Port1LID", "0x1"), ("Port1LMC", "0"),
                      ("Port1GID0", "fe80:0000:0000:0000:248a:0703:001e:39fe")])])
            w.close()
            w.close()
        w.close()
    w.depth = 1
    w.lines.append("  </object>")
    distances = ['  <distances2 type="NUMANode" nbobjs="2" kind="5" name="NUMALatency" indexing="os">',
                 '    <indexes length="4">0 1 </indexes>', '    <u64values length="12">10 20 20 10 </u64values>',
                 '  </distances2>']
    return document(w, None, None, distances)


GEN5_X16 = 16 * 32 * 128 / 130 / 8  # 63.015 GB/s, hwloc's link speed for a PCIe Gen5 x16 link

# DGX H100: GPU bus ids (nvidia-smi), the compute NIC paired with each GPU and its RDMA name (DGX H100 User Guide,
# "Network Modules": ibp24s0 mlx5_0 GPU0 ... ibp220s0 mlx5_11 GPU7); NIC bus = GPU bus - 3 throughout.
DGX_GPUS = [(0x1b, "mlx5_0", "ibp24s0"), (0x43, "mlx5_3", "ibp64s0"), (0x52, "mlx5_4", "ibp79s0"),
            (0x61, "mlx5_5", "ibp94s0"), (0x9d, "mlx5_6", "ibp154s0"), (0xc3, "mlx5_9", "ibp192s0"),
            (0xd1, "mlx5_10", "ibp206s0"), (0xdf, "mlx5_11", "ibp220s0")]


def dgx_gpu_tree(w, gpu_bus, rdma, netdev):
    """host bridge -> root port -> PCIe switch (upstream, 2 downstream ports) -> NIC, and -> a second switch -> GPU.
    Two switches between NIC and GPU: nvidia-smi topo -m shows PXB for each GPU and its NIC on a DGX H100."""
    r = gpu_bus - 6
    nic_bus = gpu_bus - 3
    w.open('type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="0000:[%02x-%02x]"' %
           (w.gp_index(), r, gpu_bus))
    bridge(w, "0000:%02x:01.0" % r, r + 1, gpu_bus, (0x8086, 0x352a, 0x8086, 0x0000, 0x04), GEN5_X16, 1)
    bridge(w, "0000:%02x:00.0" % (r + 1), r + 2, gpu_bus, (0x1000, 0xc030, 0x1000, 0x100b, 0xb0), GEN5_X16, 2)
    bridge(w, "0000:%02x:00.0" % (r + 2), nic_bus, nic_bus, (0x1000, 0xc030, 0x1000, 0x100b, 0xb0), GEN5_X16, 3)
    pcidev(w, "0000:%02x:00.0" % nic_bus, 0x0207, (0x15b3, 0x1021, 0x15b3, 0x0041, 0x00), GEN5_X16,
           [("PCIVendor", "Mellanox Technologies"), ("PCIDevice", "MT2910 Family [ConnectX-7]")],
           [(netdev, OSDEV_NETWORK, None, [("Port", "1")]), (rdma, OSDEV_OPENFABRICS, None, [("Port1State", "4")])])
    w.close()
    bridge(w, "0000:%02x:01.0" % (r + 2), r + 4, gpu_bus, (0x1000, 0xc030, 0x1000, 0x100b, 0xb0), GEN5_X16, 3)
    bridge(w, "0000:%02x:00.0" % (r + 4), r + 5, gpu_bus, (0x1000, 0xc030, 0x1000, 0x100b, 0xb0), GEN5_X16, 4)
    bridge(w, "0000:%02x:00.0" % (r + 5), gpu_bus, gpu_bus, (0x1000, 0xc030, 0x1000, 0x100b, 0xb0), GEN5_X16, 5)
    pcidev(w, "0000:%02x:00.0" % gpu_bus, 0x0302, (0x10de, 0x2330, 0x10de, 0x16c1, 0xa1), GEN5_X16,
           [("PCIVendor", "NVIDIA Corporation"), ("PCIDevice", "GH100 [H100 SXM5 80GB]")])
    for _ in range(6):  # the five bridges still open above the GPU, then the host bridge
        w.close()


def dgx_h100():
    """2x Xeon Platinum 8480C (56 cores, 2 threads each): NUMA 0 = CPUs 0-55,112-167, NUMA 1 = 56-111,168-223
    (nvidia-smi topo -m on a DGX H100); GPUs 0-3 and their NICs on NUMA 0, GPUs 4-7 on NUMA 1."""
    w = Writer()
    all_cpus = list(range(224))
    w.lines.append('  <object type="Machine" os_index="0" %s allowed_cpuset="%s" allowed_nodeset="%s" gp_index="%d">' %
                   (sets(all_cpus, [0, 1]), bitmap(all_cpus), bitmap([0, 1]), w.gp_index()))
    w.depth = 2
    for name, value in [("DMIProductName", "DGXH100"), ("DMIBoardVendor", "NVIDIA"), ("DMISysVendor", "NVIDIA"),
                        ("Backend", "Linux"), ("OSName", "Linux"), ("Architecture", "x86_64")]:
        w.info(name, value)
    for pkg in range(2):
        cpus = [c for c in all_cpus if (c // 56) % 2 == pkg]
        w.open('type="Package" os_index="%d" %s gp_index="%d"' % (pkg, sets(cpus, [pkg]), w.gp_index()))
        for name, value in [("CPUVendor", "GenuineIntel"), ("CPUFamilyNumber", "6"), ("CPUModelNumber", "143"),
                            ("CPUModel", "Intel(R) Xeon(R) Platinum 8480C"), ("CPUStepping", "8")]:
            w.info(name, value)
        w.open('type="NUMANode" os_index="%d" %s gp_index="%d" local_memory="1081819168768"' %
               (pkg, sets(cpus, [pkg]), w.gp_index()))
        w.line('<page_type size="4096" count="264116984"/>')
        w.line('<page_type size="2097152" count="0"/>')
        w.close()
        w.open('type="L3Cache" %s gp_index="%d" cache_size="110100480" depth="3" cache_linesize="64" '
               'cache_associativity="15" cache_type="0"' % (sets(cpus, [pkg]), w.gp_index()))
        cores_with_caches(w, [(c, [56 * pkg + c, 56 * pkg + c + 112]) for c in range(56)], pkg, l2=2097152, l1=49152,
                          l2_assoc=16)
        w.close()
        for gpu_bus, rdma, netdev in DGX_GPUS[4 * pkg:4 * pkg + 4]:
            dgx_gpu_tree(w, gpu_bus, rdma, netdev)
        w.close()
    w.depth = 1
    w.lines.append("  </object>")
    distances = ['  <distances2 type="NUMANode" nbobjs="2" kind="5" name="NUMALatency" indexing="os">',
                 '    <indexes length="4">0 1 </indexes>', '    <u64values length="12">10 21 21 10 </u64values>',
                 '  </distances2>']
    return document(w, None, None, distances)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, text in [("two-socket.xml", two_socket()), ("dgx-h100.xml", dgx_h100())]:
        with open(os.path.join(outdir, name), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
