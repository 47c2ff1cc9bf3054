# Unity builds for llama.cpp's C++-heavy, non-kernel targets, injected by scripts/build_llama_cpp.sh
# with -DCMAKE_PROJECT_INCLUDE (llama.cpp's sources stay untouched). The server, its common library
# and mtmd are dozens of files that each parse the same large headers (nlohmann::json, chat.h,
# clip): compiled in batches they took under half the compile time on 2 cores. ggml and
# libllama (the kernels and the model code every token runs through) keep one object per file.
# Files that cannot share a translation unit are compiled alone.
include_guard(GLOBAL)
function(evalcluster_llama_cpp_unity)
  foreach(target llama-common server-context llama-server-impl mtmd)
    if(TARGET ${target})
      set_property(TARGET ${target} PROPERTY UNITY_BUILD ON)
    endif()
  endforeach()
  # json.cpp specializes a template the other files instantiate; mtmd-helper refuses mtmd's
  # internal headers, which its neighbours include.
  set_property(SOURCE "${CMAKE_SOURCE_DIR}/common/json.cpp"
               DIRECTORY "${CMAKE_SOURCE_DIR}/common" PROPERTY SKIP_UNITY_BUILD_INCLUSION ON)
  foreach(file mtmd-helper.cpp mtmd-helper-gen.cpp)
    set_property(SOURCE "${CMAKE_SOURCE_DIR}/tools/mtmd/${file}"
                 DIRECTORY "${CMAKE_SOURCE_DIR}/tools/mtmd" PROPERTY SKIP_UNITY_BUILD_INCLUSION ON)
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL evalcluster_llama_cpp_unity)
