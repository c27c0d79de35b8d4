# cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
# Writes OUT defining `const char NAME[]` with the bytes of IN and a NUL, so
# generated kernels can carry shared source (the Philox core) verbatim.
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}.tmp" "/* generated from ${NAME_SRC} by cmake/embed.cmake */\nconst char ${NAME}[] = {\n${bytes}0x00};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
