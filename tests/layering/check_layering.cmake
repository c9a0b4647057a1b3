# The folder dependency rules of ARCHITECTURE.md section 1 and src/README.md, checked on
# every quoted #include:  cmake -DROOT=<repo> -P check_layering.cmake
#
# Inside src/, the layers in order (each may include itself and the layers before it):
#   core -> ir -> passes -> dispatch -> runtime
#   src/core/      core/ only
#   src/ir/        core/, ir/
#   src/passes/    core/, ir/, passes/           (no device, no dispatch report)
#   src/dispatch/  core/, ir/, passes/, dispatch/ (a device is dispatch/target.hpp's Target)
#   src/runtime/   core/, ir/, passes/, dispatch/, runtime/, and io/ (all of src)
#   src/io/        core/, ir/, io/
#   src/dist/      all of src (communicators and the collectives' kernels sit on the runtime)
#   a new folder under src/ needs its row here (the check fails until it has one).
#   src/ never includes solvers/, nn/, devices/ or apps/.
# Outside src/:
#   devices/X/     src/ and its own folder: never another device folder, solvers/, nn/ or apps/
#   solvers/, nn/  never devices/ or apps/
#   examples/*.cpp only the public headers (and the standard library, <...>):
#     core/*.hpp
#     ir/frontend.hpp, ir/graph.hpp, ir/text.hpp           (building graphs, the text form)
#     dispatch/report.hpp                                  (DispatchReport, LegalizeError)
#     runtime/runtime.hpp, runtime/device.hpp, runtime/program.hpp, runtime/executor.hpp,
#     runtime/program_text.hpp                             (compile, run, devices, L3 text)
#     passes/autodiff.hpp                                  (grad, vjp, jvp, hvp)
#     io/*.hpp
#     solvers/<module>/*.hpp, nn/**/*.hpp
#   Not public: the rest of passes/, the rest of dispatch/ (legalize, rewrites, coverage, target),
#   ir/op_registry.hpp and ir/ops/, runtime/kernel_table.hpp and standard_kernels.hpp (for
#   device implementers), devices/. Public headers may include internal ones themselves.
if(NOT ROOT)
  message(FATAL_ERROR "pass -DROOT=<repository root>")
endif()

# Which folders of src/ each folder of src/ may include.
set(allowed_core "core")
set(allowed_ir "core|ir")
set(allowed_passes "core|ir|passes")
set(allowed_dispatch "core|ir|passes|dispatch")
set(allowed_runtime "core|ir|passes|dispatch|runtime|io")
set(allowed_io "core|ir|io")
set(allowed_dist "core|ir|passes|dispatch|runtime|io|dist")
set(public_headers
    "^core/[^/]+\\.hpp$"
    "^ir/(frontend|graph|text)\\.hpp$"
    "^dispatch/report\\.hpp$"
    "^runtime/(runtime|device|program|executor|program_text)\\.hpp$"
    "^passes/autodiff\\.hpp$"
    "^io/[^/]+\\.hpp$"
    "^dist/(communicator|ops|session|mpi)\\.hpp$"
    "^solvers/[^/]+/[^/]+\\.hpp$"
    "^nn/.+\\.hpp$")

set(violations "")
file(GLOB_RECURSE files RELATIVE ${ROOT} ${ROOT}/src/*.hpp ${ROOT}/src/*.cpp ${ROOT}/devices/*.hpp
     ${ROOT}/devices/*.cpp ${ROOT}/devices/*.cu ${ROOT}/devices/*.cuh ${ROOT}/solvers/*.hpp ${ROOT}/solvers/*.cpp
     ${ROOT}/nn/*.hpp ${ROOT}/nn/*.cpp)
file(GLOB examples RELATIVE ${ROOT} ${ROOT}/examples/*.cpp)
list(APPEND files ${examples})
foreach(f IN LISTS files)
  file(STRINGS ${ROOT}/${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" inc "${line}")
    set(bad "")
    if(f MATCHES "^src/([^/]+)/")
      set(layer ${CMAKE_MATCH_1})
      if(inc MATCHES "^(\\.\\./)*(solvers|nn|devices|apps)/")
        set(bad "src/ may not include ${inc}")
      elseif(NOT DEFINED allowed_${layer})
        set(bad "src/${layer}/ has no row in check_layering.cmake (which folders may it include?)")
      elseif(inc MATCHES "^\\.\\./")
        set(bad "src/${layer} includes ${inc}: spell includes from src/ (\"folder/file.hpp\")")
      elseif(inc MATCHES "^([^/]+)/" AND NOT CMAKE_MATCH_1 MATCHES "^(${allowed_${layer}})$")
        string(REPLACE "|" ", " may "${allowed_${layer}}")
        set(bad "src/${layer} may include only ${may} (found ${inc})")
      endif()
    elseif(f MATCHES "^devices/([^/]+)/")
      set(dev ${CMAKE_MATCH_1})
      if(inc MATCHES "^(\\.\\./)+([^/]+)/" AND NOT CMAKE_MATCH_2 STREQUAL dev)
        set(bad "device ${dev} may not include another folder's ${inc}")
      elseif(inc MATCHES "^devices/([^/]+)/" AND NOT CMAKE_MATCH_1 STREQUAL dev)
        set(bad "device ${dev} may not include ${inc}")
      elseif(inc MATCHES "^(solvers|nn|apps)/")
        set(bad "device ${dev} may not include ${inc}")
      endif()
    elseif(f MATCHES "^(solvers|nn)/")
      if(inc MATCHES "^(\\.\\./)*(devices|apps)/")
        set(bad "${CMAKE_MATCH_2} code may not include ${inc}")
      endif()
    elseif(f MATCHES "^examples/")
      set(public FALSE)
      foreach(re IN LISTS public_headers)
        if(inc MATCHES "${re}")
          set(public TRUE)
        endif()
      endforeach()
      if(NOT public)
        set(bad "examples use only the public headers (tests/layering/check_layering.cmake, src/README.md), not ${inc}")
      endif()
    endif()
    if(bad)
      list(APPEND violations "${f}: ${bad}")
    endif()
  endforeach()
endforeach()
list(LENGTH files n)
if(violations)
  string(REPLACE ";" "\n  " msg "${violations}")
  message(FATAL_ERROR "layering violations:\n  ${msg}")
endif()
message(STATUS "layering: ${n} files follow the folder rules")
