"""Build cudnn_explorer and its native module cudnn_explorer._C.

The extension is plain C++ (no .cu files): it calls cuDNN and the CUDA runtime
through PyTorch's handle, so it builds on a machine without a GPU. cuDNN's
headers and library come from the ``nvidia-cudnn-cu13`` wheel that torch itself
depends on, so the extension links the very library torch loads. Override with
CUDNN_INCLUDE_DIR / CUDNN_LIB_DIR.
"""
import glob
import os

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

import shutil


def _guess_cuda_home():
    """torch guesses CUDA_HOME from the nvcc on PATH; a /usr/local/bin/nvcc link makes
    that /usr/local, which has no CUDA headers. Follow the link to the real toolkit."""
    if os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
        return
    nvcc = shutil.which("nvcc")
    candidates = []
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    candidates.append("/usr/local/cuda")
    for c in candidates:
        if os.path.exists(os.path.join(c, "include", "cuda_runtime_api.h")):
            os.environ["CUDA_HOME"] = c
            return


_guess_cuda_home()

try:
    import torch  # noqa: E402
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension  # noqa: E402
except ImportError:
    raise SystemExit(
        "cudnn_explorer: torch is not importable here. The extension is compiled against "
        "the torch of your environment: install torch first, then build without build "
        "isolation:  pip install --no-build-isolation .  (a plain `pip install .` builds in "
        "an isolated environment that has no torch)") from None


def _nvidia_dir(sub):
    try:
        import nvidia  # namespace package installed by the nvidia-* wheels
    except ImportError:
        return None
    for base in nvidia.__path__:
        d = os.path.join(base, sub)
        if os.path.isdir(d):
            return d
    return None


def cudnn_dirs():
    inc = os.environ.get("CUDNN_INCLUDE_DIR")
    lib = os.environ.get("CUDNN_LIB_DIR")
    wheel = _nvidia_dir("cudnn")
    if inc is None and wheel:
        inc = os.path.join(wheel, "include")
    if lib is None and wheel:
        lib = os.path.join(wheel, "lib")
    if not inc or not os.path.exists(os.path.join(inc, "cudnn.h")):
        raise SystemExit(
            "cudnn_explorer: cudnn.h not found. Install the cuDNN wheel torch uses "
            "(pip install nvidia-cudnn-cu13) or set CUDNN_INCLUDE_DIR and CUDNN_LIB_DIR."
        )
    return inc, lib


def extra_cuda_includes():
    """The local CUDA toolkit can be partial (no cusparse.h, which ATen includes):
    then fall back to the nvidia-cu13 wheel's headers, searched after the toolkit's."""
    if CUDA_HOME and os.path.exists(os.path.join(CUDA_HOME, "include", "cusparse.h")):
        return []
    for sub in ("cu13/include", "cu12/include"):
        d = _nvidia_dir(sub)
        if d and os.path.exists(os.path.join(d, "cusparse.h")):
            return ["-idirafter", d]
    return []


def frontend_include():
    """cudnn-frontend's headers, from the nvidia-cudnn-frontend wheel (it installs them in
    <site-packages>/include) or CUDNN_FRONTEND_INCLUDE_DIR. None: build without engines."""
    d = os.environ.get("CUDNN_FRONTEND_INCLUDE_DIR")
    if d:
        return d
    import site
    import sysconfig

    roots = list(site.getsitepackages()) + [sysconfig.get_paths()["purelib"]]
    roots += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for root in roots:
        inc = os.path.join(root, "include")
        if os.path.exists(os.path.join(inc, "cudnn_frontend.h")):
            return inc
    return None


cudnn_inc, cudnn_lib = cudnn_dirs()
fe_inc = frontend_include()
if fe_inc is None:
    print("cudnn_explorer: cudnn-frontend headers not found (pip install nvidia-cudnn-frontend); "
          "building without engine configs")
link_args = ["-ldl"]  # dlopen: the driver's entry points (csrc/graph_kernels.cpp)
if cudnn_lib:
    libs = sorted(glob.glob(os.path.join(cudnn_lib, "libcudnn.so*")))
    if os.path.exists(os.path.join(cudnn_lib, "libcudnn.so")):
        link_args += [f"-L{cudnn_lib}", "-lcudnn"]
    elif libs:
        # The wheel ships only libcudnn.so.9: link it by file name.
        link_args += [f"-L{cudnn_lib}", f"-l:{os.path.basename(libs[0])}"]
    link_args.append(f"-Wl,-rpath,{cudnn_lib}")
else:
    link_args.append("-lcudnn")

# torch.utils.cpp_extension needs an arch list when no GPU is visible; we compile no
# device code, so any value works. Never decide what to build from the GPU's presence.
os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")

def nvrtc_link_args():
    """cudnn-frontend's headers call NVRTC (run-time compiled engines): link libnvrtc from
    the CUDA toolkit or the nvidia-cuda-nvrtc / nvidia-cu13 wheel."""
    dirs = [os.path.join(CUDA_HOME, "lib64")] if CUDA_HOME else []
    dirs += [d for d in (_nvidia_dir("cu13/lib"), _nvidia_dir("cuda_nvrtc/lib")) if d]
    for d in dirs:
        names = sorted(glob.glob(os.path.join(d, "libnvrtc.so*")))
        names = [n for n in names if "builtins" not in n and ".alt." not in n]
        if names:
            return [f"-L{d}", f"-l:{os.path.basename(names[0])}", f"-Wl,-rpath,{d}"]
    return ["-lnvrtc"]


if fe_inc:
    link_args += nvrtc_link_args()

ext = CUDAExtension(
    name="cudnn_explorer._C",
    sources=sorted(glob.glob("csrc/*.cpp")),
    include_dirs=[cudnn_inc] + ([fe_inc] if fe_inc else []),
    define_macros=[("CE_BUILD_TORCH_VERSION", f'"{torch.__version__}"')]
    + ([("CE_HAVE_FRONTEND", "1")] if fe_inc else []),
    extra_compile_args={"cxx": ["-O2", "-Wall", "-Wno-unused-function"] + extra_cuda_includes()},
    extra_link_args=link_args,
)

def version():
    """__version__ from cudnn_explorer/core/version.py, read without importing the package."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "cudnn_explorer", "core", "version.py")) as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split("=", 1)[1].strip().strip("\"'")
    raise SystemExit("cudnn_explorer: no __version__ in cudnn_explorer/core/version.py")


# Note [the start-up hook's .pth]: cudnn_explorer_hook.pth (one line, core/zero_code.py's PTH_LINE)
# goes to the root of site-packages, as coverage.py and pytest-cov install theirs, so
# that CUDNN_EXPLORER_RECORD / CUDNN_EXPLORER_PLANS reach every Python process with no
# code change. A wheel gets it through build_py (build_lib's root is site-packages'); an
# editable install (pip install -e .) through editable_wheel, which writes it into the
# wheel's root. Where neither ran (another installer): python -m cudnn_explorer hook
# install.
PTH = "cudnn_explorer_hook.pth"


class BuildPyWithHook(build_py):
    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, PTH))

    def get_outputs(self, *args, **kwargs):
        return list(super().get_outputs(*args, **kwargs)) + [os.path.join(self.build_lib, PTH)]


class EditableWheelWithHook(editable_wheel):
    def _install_namespaces(self, installation_dir, pth_prefix):
        super()._install_namespaces(installation_dir, pth_prefix)
        shutil.copy(PTH, os.path.join(str(installation_dir), PTH))


setup(
    name="cudnn_explorer",
    version=version(),
    description="See every cuDNN convolution algorithm, what PyTorch picks, and what it costs",
    packages=find_packages(include=["cudnn_explorer", "cudnn_explorer.*"])
    + ["cudnn_explorer.devices"],
    # the shipped device profiles (data/devices) install as cudnn_explorer/devices
    package_dir={"cudnn_explorer.devices": "data/devices"},
    package_data={"cudnn_explorer.devices": ["*.json"]},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True),
              "build_py": BuildPyWithHook, "editable_wheel": EditableWheelWithHook},
    python_requires=">=3.10",
    install_requires=["torch", "numpy", "tabulate", "tqdm"],
    # model names (--model factories need none); heatmaps (--plot)
    extras_require={"models": ["torchvision"], "timm": ["timm"], "plots": ["matplotlib"]},
    entry_points={"console_scripts": ["cudnn-explorer = cudnn_explorer.cli.main:console"]},
)
