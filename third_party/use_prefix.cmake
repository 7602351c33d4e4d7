# CTUNE_THIRD_PARTY=ON: every dependency but LibTorch comes from third_party/prefix, which
# scripts/vendor_deps.sh fills with the pinned packages of third_party/deps.lock. For machines
# with a compiler, CMake and a PyTorch installation only (docs/gpu.md).
set(CTUNE_THIRD_PARTY_PREFIX "${CMAKE_CURRENT_LIST_DIR}/prefix" CACHE PATH "Where scripts/vendor_deps.sh unpacked the dependencies")
set(_ctune_root "${CTUNE_THIRD_PARTY_PREFIX}/usr")
set(_ctune_libdir "${_ctune_root}/lib/x86_64-linux-gnu")
if(NOT EXISTS "${_ctune_libdir}/pkgconfig/sentencepiece.pc")
  message(FATAL_ERROR "CTUNE_THIRD_PARTY=ON but ${CTUNE_THIRD_PARTY_PREFIX} holds no unpacked dependencies: "
                      "run scripts/vendor_deps.sh (where apt works) and bring the folder along")
endif()
# CMake package configs (nlohmann_json, spdlog, fmt, CLI11, yaml-cpp, GTest) and find_path /
# find_library look here before the system.
list(PREPEND CMAKE_PREFIX_PATH "${_ctune_root}")
set(CMAKE_LIBRARY_ARCHITECTURE x86_64-linux-gnu)
# pkg-config modules (oniguruma, utf8proc, sentencepiece, xxhash) only from here: the .pc files
# say prefix=/usr, which the sysroot maps into the folder.
set(ENV{PKG_CONFIG_LIBDIR} "${_ctune_libdir}/pkgconfig:${_ctune_root}/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${CTUNE_THIRD_PARTY_PREFIX}")
# The programs find these shared libraries at run time through their RPATH, and so do the
# libraries among them that need each other (DT_RPATH applies to dependencies of dependencies,
# DT_RUNPATH does not).
list(APPEND CMAKE_BUILD_RPATH "${_ctune_libdir}")
add_link_options(-Wl,--disable-new-dtags)
message(STATUS "ctune: dependencies from ${CTUNE_THIRD_PARTY_PREFIX}")
