# examples/custom_model against the installed package, as a user builds it: install this build
# into a fresh prefix, configure and build the example with find_package(tower), then run its CLI:
# make a data set, train the user's model on 2 towers, evaluate it. Run by CTest:
#   cmake -DBUILD=<build dir> -DSRC=<repo> -DWORK=<scratch dir> -P custom_model_test.cmake
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "failed (${code}): ${ARGN}\n${out}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix)
run(${CMAKE_COMMAND} -S ${SRC}/examples/custom_model -B ${WORK}/build -G Ninja
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK}/prefix "-DCMAKE_CXX_FLAGS=${FLAGS}")
run(${CMAKE_COMMAND} --build ${WORK}/build)
set(mynet ${WORK}/build/mynet)
run(${mynet} models)
if(NOT output MATCHES "mynet")
  message(FATAL_ERROR "`mynet models` does not list mynet:\n${output}")
endif()
run(${mynet} make-dataset --format idx --out ${WORK}/data --num_train 1000 --num_test 200 --seed 1)
run(${mynet} train --model mynet --data idx:${WORK}/data --num_devices 2 --max_steps 60
    --batch_size 32 --train_dir ${WORK}/train --log_every 20)
if(NOT EXISTS ${WORK}/train/model.ckpt-60.safetensors)
  message(FATAL_ERROR "no checkpoint after training:\n${output}")
endif()
run(${mynet} eval --train_dir ${WORK}/train --data idx:${WORK}/data --run_once)
if(NOT output MATCHES "precision")
  message(FATAL_ERROR "eval printed no precision:\n${output}")
endif()
message(STATUS "${output}")
file(REMOVE_RECURSE ${WORK})
